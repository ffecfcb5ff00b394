"""The transport's door: malformed messages and oversized frames from a real ZeroMQ peer are
dropped and counted, never handed to an executor (issue 10, items 1 and 6)."""
from __future__ import annotations

import msgpack
import zmq

from stormpy.streams import ACK_ACK, ACK_FAIL, ACK_INIT
from stormpy.testing import free_port, wait_until
from stormpy.worker.transfer import ZmqTransfer

from tests.worker.test_zmq_transfer import CollectingRuntime


def _push(port: int, frames: list[bytes]) -> None:
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 2000)
    push.connect(f"tcp://127.0.0.1:{port}")
    for frame in frames:
        push.send(frame)
    push.close()
    ctx.term()


def test_malformed_messages_are_dropped_counted_and_reported() -> None:
    port = free_port()
    errors: list[tuple[int, str]] = []
    runtime = CollectingRuntime({1, 2})
    transfer = ZmqTransfer("127.0.0.1", port, bind_host="127.0.0.1",
                           report_error=lambda task, text: errors.append((task, text)))
    transfer.start(runtime)
    try:
        bad = [(ACK_ACK, 7, 5, None),              # the probe: an int, not a list of roots
               (ACK_FAIL, 7, [], None),             # no root
               (ACK_INIT, 7, [1, 2], None),          # not a triple
               (ACK_ACK, 7, ["x"], None),            # a string root
               ("default", "7", [1], None),           # src not a task id
               ("default", 7, [1], {"a": 1}),         # anchors not {int: int}
               ("default", 7, 3, None)]               # values not a sequence
        good = [(ACK_ACK, 7, [11, 12], None), ("default", 7, ["fine"], {1: 2})]
        _push(port, [msgpack.packb([[1, bad + good]]), msgpack.packb([[2, [("default", 7, ["after"], None)]]])])
        wait_until(lambda: runtime.count(2) == 1, 20, "the good frame after the bad one")
        assert runtime.received[1] == [(ACK_ACK, 7, (11, 12), None), ("default", 7, ("fine",), {1: 2})]
        assert transfer.counters["bad_messages"] == len(bad)
        assert errors and all(task == 1 for task, _ in errors)
        assert "malformed" in errors[0][1] and "task 7" in errors[0][1]
        assert len(errors) < len(bad)   # rate-limited: 1st, 2nd, 4th, ...
    finally:
        transfer.stop("test done")


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_frames_above_the_max_message_size_are_refused_by_the_socket() -> None:
    """Issue 10 item 6: a 1 GiB frame took a worker to 3.1 GB; now ZeroMQ refuses it unread."""
    import subprocess
    import sys

    port = free_port()
    runtime = CollectingRuntime({1})
    transfer = ZmqTransfer("127.0.0.1", port, bind_host="127.0.0.1", max_message_bytes=64 * 1024)
    transfer.start(runtime)
    try:
        before = _rss_bytes()
        sender = ("import sys, zmq\n"
                  "ctx = zmq.Context(); s = ctx.socket(zmq.PUSH); s.setsockopt(zmq.LINGER, 5000)\n"
                  f"s.connect('tcp://127.0.0.1:{port}')\n"
                  "s.send(b'\\x00' * (200 * 1024 * 1024))\n"
                  "s.close(); ctx.term()\n")
        subprocess.run([sys.executable, "-c", sender], check=True, timeout=60)
        wait_until(lambda: transfer.counters["peer_disconnects"] >= 1, 20, "the oversized sender cut off")
        grown = _rss_bytes() - before
        assert grown < 50 * 1024 * 1024, f"receiver grew by {grown} bytes"
        _push(port, [msgpack.packb([[1, [("default", 3, ["small"], None)]]])])
        wait_until(lambda: runtime.count(1) == 1, 20, "a normal frame after the oversized one")
        assert transfer.counters["received_frames"] == 1
    finally:
        transfer.stop("test done")


def test_the_sender_splits_frames_below_the_max_and_drops_a_single_oversized_message() -> None:
    a_port, b_port = free_port(), free_port()
    errors: list[tuple[int, str]] = []
    a_runtime, b_runtime = CollectingRuntime({1}), CollectingRuntime({2})
    a = ZmqTransfer("127.0.0.1", a_port, bind_host="127.0.0.1", max_message_bytes=64 * 1024,
                    report_error=lambda task, text: errors.append((task, text)))
    b = ZmqTransfer("127.0.0.1", b_port, bind_host="127.0.0.1", max_message_bytes=64 * 1024)
    routes = {1: ("127.0.0.1", a_port), 2: ("127.0.0.1", b_port)}
    for transfer, runtime in ((a, a_runtime), (b, b_runtime)):
        transfer.update_routes(routes)
        transfer.start(runtime)
    try:
        a.send(2, [("default", 1, ["x" * 100 * 1024], None)])   # one message above the limit
        total = 3000
        for start in range(0, total, 500):   # ~1 KB each: far above 64 KiB per drained round
            a.send(2, [("default", 1, ["y" * 1000, i], None) for i in range(start, start + 500)])
        wait_until(lambda: b_runtime.count(2) == total, 30, f"{total} messages in frames below the max")
        assert sorted(m[2][1] for m in b_runtime.received[2]) == list(range(total))
        assert a.counters["oversized_messages"] == 1
        assert errors and "max.message.bytes" in errors[0][1]
        assert b.counters["peer_disconnects"] == 0
    finally:
        a.stop("test done")
        b.stop("test done")


def test_curve_encrypts_and_refuses_peers_without_the_keys() -> None:
    """DESIGN 13: with CURVE on, workers of a topology talk; a forged tuple from a process
    without the keys (plain ZeroMQ, or CURVE with other keys) never reaches a task."""
    from stormpy.auth import curve_keys

    keys = curve_keys(b"the shared secret of this cluster", "topo-1-1")
    a_port, b_port = free_port(), free_port()
    a_runtime, b_runtime = CollectingRuntime({1}), CollectingRuntime({2})
    a = ZmqTransfer("127.0.0.1", a_port, bind_host="127.0.0.1", curve=keys)
    b = ZmqTransfer("127.0.0.1", b_port, bind_host="127.0.0.1", curve=keys)
    routes = {1: ("127.0.0.1", a_port), 2: ("127.0.0.1", b_port)}
    for transfer, runtime in ((a, a_runtime), (b, b_runtime)):
        transfer.update_routes(routes)
        transfer.start(runtime)
    try:
        a.send(2, [("default", 1, ["secret words"], None)])
        wait_until(lambda: b_runtime.count(2) == 1, 20, "a CURVE message between workers")
        forged = msgpack.packb([[2, [("default", 1, ["forged"], None)]]])
        _push(b_port, [forged])                                  # plain ZeroMQ
        other = curve_keys(b"another secret, another cluster", "topo-1-1")
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.curve_serverkey, push.curve_publickey, push.curve_secretkey = other[0], other[0], other[1]
        push.connect(f"tcp://127.0.0.1:{b_port}")
        try:
            push.send(forged, zmq.NOBLOCK)
        except zmq.Again:
            pass   # never connected: the handshake failed, as it should
        wait_until(lambda: b.counters["refused_handshakes"] >= 2, 20, "both forged peers refused")
        push.close(linger=0)
        ctx.term()
        a.send(2, [("default", 1, ["after"], None)])
        wait_until(lambda: b_runtime.count(2) == 2, 20, "the good peer still served")
        assert [m[2][0] for m in b_runtime.received[2]] == ["secret words", "after"]
    finally:
        a.stop("test done")
        b.stop("test done")
