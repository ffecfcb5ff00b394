"""The transport's door: malformed messages and oversized frames from a real ZeroMQ peer are
dropped and counted, never handed to an executor (issue 10, items 1 and 6). Its threads never
die silently: a user serializer's exception fails only its tuples, a failure on the send or
receive thread is reported and the thread restarted (issue 26, item 7)."""
from __future__ import annotations

import msgpack
import zmq

from stormpy.daemon_guard import ThreadGuard
from stormpy.serialization import Serialization
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
               ("default", 7, [1], ("a", 1)),         # anchors not (int, int)
               ("default", 7, [1], (1, 2, 3)),        # not pairs
               ("default", 7, [1], {1: 2}),           # a map, not (root, edge) pairs
               ("default", 7, 3, None)]               # values not a sequence
        good = [(ACK_ACK, 7, [11, 12], None), ("default", 7, ["fine"], (1, 2))]
        _push(port, [msgpack.packb([[1, bad + good]]), msgpack.packb([[2, [("default", 7, ["after"], None)]]])])
        wait_until(lambda: runtime.count(2) == 1, 20, "the good frame after the bad one")
        assert runtime.received[1] == [(ACK_ACK, 7, (11, 12), None), ("default", 7, ("fine",), (1, 2))]
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


# ---------------------------------------------------------------- no thread dies silently (issue 26, item 7)

class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents


class MoneySerializer:
    """A user serializer with a bug: negative amounts raise KeyError (not a TypeError)."""

    currencies = {"EUR": 1}

    def serialize(self, money: Money) -> bytes:
        if money.cents < 0:
            return self.currencies["negative"].to_bytes(1, "big")   # KeyError
        return money.cents.to_bytes(8, "big")

    def deserialize(self, data: bytes) -> Money:
        cents = int.from_bytes(data, "big")
        if cents == 1313:
            raise LookupError("unlucky amount")   # a bug on the receiving side
        return Money(cents)


class GuardLog:
    """What a ThreadGuard reported (the worker sends it to ZooKeeper as a __system error)."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str]] = []
        self.fatal: list[str] = []

    def guard(self, name: str = "test worker", **kwargs: object) -> ThreadGuard:
        return ThreadGuard(name, report=lambda thread, text: self.reports.append((thread, text)),
                           on_fatal=self.fatal.append, backoff_secs=0.05, **kwargs)

    def threads(self) -> list[str]:
        return [thread for thread, _ in list(self.reports)]


def _two_transfers(a_runtime, b_runtime, b_kwargs=None, **a_kwargs):
    a_port, b_port = free_port(), free_port()
    serialization = Serialization({"Money": f"{__name__}:MoneySerializer"})
    a = ZmqTransfer("127.0.0.1", a_port, bind_host="127.0.0.1", serialization=serialization, **a_kwargs)
    b = ZmqTransfer("127.0.0.1", b_port, bind_host="127.0.0.1", serialization=serialization, **(b_kwargs or {}))
    routes = {1: ("127.0.0.1", a_port), 9: ("127.0.0.1", a_port), 2: ("127.0.0.1", b_port)}
    for transfer, runtime in ((a, a_runtime), (b, b_runtime)):
        transfer.update_routes(routes)
        transfer.start(runtime)
    return a, b


def test_a_serializer_raising_keyerror_fails_only_its_tuples() -> None:
    """The issue's case: a user serializer raising KeyError killed the send thread. Now the
    tuple is dropped, reported as the emitting component's error and its tree failed at once
    through the acker (the spout replays it); the rest flows and the send thread lives on."""
    errors: list[tuple[int, str]] = []
    log_ = GuardLog()
    a_runtime, b_runtime = CollectingRuntime({1, 9}), CollectingRuntime({2})
    a, b = _two_transfers(a_runtime, b_runtime, guard=log_.guard(), acker_tasks=[9],
                          report_error=lambda task, text: errors.append((task, text)))
    try:
        batch = [("default", 1, [Money(-i if i % 5 == 0 else i)], (1000 + i, 7)) for i in range(1, 51)]
        a.send(2, batch)
        wait_until(lambda: b_runtime.count(2) == 40, 20, "the 40 serializable tuples")
        assert sorted(m[2][0].cents for m in b_runtime.received[2]) == [i for i in range(1, 51) if i % 5]
        wait_until(lambda: a_runtime.count(9) == 10, 20, "an __ack_fail per dropped tuple, to the acker")
        fails = a_runtime.received[9]
        assert {m[0] for m in fails} == {ACK_FAIL}
        assert sorted(m[2][0] for m in fails) == [1000 + i for i in range(5, 51, 5)]
        assert len(errors) == 10 and all(task == 1 and "KeyError" in text for task, text in errors)
        a.send(2, [("default", 1, [Money(77)], None)])
        wait_until(lambda: b_runtime.count(2) == 41, 20, "a tuple after the failures: the send thread lives")
        assert log_.reports == [] and a.counters["failed_trees"] == 10
    finally:
        a.stop("test done")
        b.stop("test done")


def test_a_deserializer_raising_fails_only_its_tuples_on_the_receiving_side() -> None:
    errors: list[tuple[int, str]] = []
    a_runtime, b_runtime = CollectingRuntime({1, 9}), CollectingRuntime({2})
    a, b = _two_transfers(a_runtime, b_runtime, b_kwargs={
        "acker_tasks": [9], "report_error": lambda task, text: errors.append((task, text))})
    try:
        a.send(2, [("default", 1, [[Money(i)]], (500 + i, 3)) for i in range(1310, 1320)])
        wait_until(lambda: b_runtime.count(2) == 9, 20, "the 9 decodable tuples of the frame")
        assert 1313 not in {m[2][0][0].cents for m in b_runtime.received[2]}
        wait_until(lambda: a_runtime.count(9) == 1, 20, "the undecodable tuple's tree failed at the acker")
        assert [list(m) for m in a_runtime.received[9]] == [[ACK_FAIL, 1, [1813], None]]
        assert len(errors) == 1 and errors[0][0] == 1 and "LookupError: unlucky amount" in errors[0][1]
        assert b.counters["bad_frames"] == 0
    finally:
        a.stop("test done")
        b.stop("test done")


class FlakyRuntime(CollectingRuntime):
    """Real threads call it; its first calls of one kind raise, like a framework bug would."""

    def __init__(self, local_tasks: set[int], fail_receive: int = 0, fail_overload_checks: int = 0) -> None:
        super().__init__(local_tasks)
        self.fail_receive = fail_receive
        self.fail_overload_checks = fail_overload_checks

    def receive(self, task_id: int, messages: list) -> None:
        if self.fail_receive > 0:
            self.fail_receive -= 1
            raise RuntimeError("injected: the runtime could not take a batch")
        super().receive(task_id, messages)

    def is_locally_overloaded(self) -> bool:
        if self.fail_overload_checks > 0:
            self.fail_overload_checks -= 1
            raise RuntimeError("injected: the overload check failed")
        return self.overloaded


def test_a_failure_on_the_send_thread_is_reported_and_the_thread_restarted() -> None:
    log_ = GuardLog()
    a_runtime, b_runtime = FlakyRuntime({1}, fail_overload_checks=1), CollectingRuntime({2})
    a, b = _two_transfers(a_runtime, b_runtime, guard=log_.guard())
    try:
        wait_until(lambda: log_.threads(), 20, "the send thread's failure reported")
        thread, text = log_.reports[0]
        assert thread.startswith("transfer-send") and "injected: the overload check failed" in text
        a.send(2, [("default", 1, [Money(5)], None)])
        wait_until(lambda: b_runtime.count(2) == 1, 20, "a tuple sent by the restarted send thread")
        assert log_.fatal == []
    finally:
        a.stop("test done")
        b.stop("test done")


def test_a_failure_on_the_receive_thread_is_reported_and_the_thread_restarted() -> None:
    log_ = GuardLog()
    a_runtime, b_runtime = CollectingRuntime({1}), FlakyRuntime({2}, fail_receive=1)
    a_port, b_port = free_port(), free_port()
    a = ZmqTransfer("127.0.0.1", a_port, bind_host="127.0.0.1")
    b = ZmqTransfer("127.0.0.1", b_port, bind_host="127.0.0.1", guard=log_.guard())
    for transfer, runtime in ((a, a_runtime), (b, b_runtime)):
        transfer.update_routes({1: ("127.0.0.1", a_port), 2: ("127.0.0.1", b_port)})
        transfer.start(runtime)
    try:
        a.send(2, [("default", 1, ["lost with the failure"], None)])
        wait_until(lambda: log_.threads(), 20, "the receive thread's failure reported")
        thread, text = log_.reports[0]
        assert thread.startswith("transfer-recv") and "could not take a batch" in text
        a.send(2, [("default", 1, ["after"], None)])
        wait_until(lambda: b_runtime.count(2) == 1, 20, "a frame taken by the restarted receive thread")
        assert b_runtime.received[2][0][2] == ("after",) and b.counters["bad_frames"] == 0
    finally:
        a.stop("test done")
        b.stop("test done")


# ---------------------------------------------------------------- control frames (issue 26, item 4)

_FOREIGN = """
import sys, time, msgpack, zmq
port, peer_port, guessed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ctx = zmq.Context(); push = ctx.socket(zmq.PUSH); push.setsockopt(zmq.LINGER, 3000)
push.connect(f"tcp://127.0.0.1:{port}")
for _ in range(20):   # the old 4-field frame, one with a guessed token, and a stranger's address
    push.send(msgpack.packb([[-1, [["backpressure", "127.0.0.1", peer_port, True]]]]))
    push.send(msgpack.packb([[-1, [["backpressure", "127.0.0.1", peer_port, True, guessed]]]]))
    push.send(msgpack.packb([[-1, [["backpressure", "10.9.9.9", 6700, True, guessed]]]]))
    time.sleep(0.05)
push.close(); ctx.term()
"""


def test_a_backpressure_frame_from_outside_the_topology_stops_nothing() -> None:
    """Anyone who reaches a worker port could send the frame that throttles every spout. With
    the topology's control token, a foreign process's frames are refused; a real peer's work."""
    import subprocess
    import sys

    token = "5f0c" * 8
    a_port, b_port = free_port(), free_port()
    a_runtime, b_runtime = CollectingRuntime({1}), CollectingRuntime({2})
    a = ZmqTransfer("127.0.0.1", a_port, bind_host="127.0.0.1", control_token=token)
    b = ZmqTransfer("127.0.0.1", b_port, bind_host="127.0.0.1", control_token=token)
    routes = {1: ("127.0.0.1", a_port), 2: ("127.0.0.1", b_port)}
    for transfer, runtime in ((a, a_runtime), (b, b_runtime)):
        transfer.update_routes(routes)
        transfer.start(runtime)
    try:
        a.send(2, [("default", 1, ["hello"], None)])
        wait_until(lambda: b_runtime.count(2) == 1, 20, "the workers connected")
        subprocess.run([sys.executable, "-c", _FOREIGN, str(a_port), str(b_port), "not-the-token"],
                       check=True, timeout=60)
        wait_until(lambda: a.counters["refused_control"] >= 60, 20, "every forged frame refused")
        assert True not in a_runtime.remote_bp, "a forged frame throttled the spouts"
        # the real peer, with the token, still can
        b_runtime.overloaded = True
        wait_until(lambda: a_runtime.remote_bp[-1:] == [True], 20, "backpressure ON from the real peer")
        b_runtime.overloaded = False
        wait_until(lambda: a_runtime.remote_bp[-1:] == [False], 20, "backpressure OFF from the real peer")
        assert a.counters["refused_control"] == 60
    finally:
        a.stop("test done")
        b.stop("test done")


def test_malformed_batches_are_dropped_at_the_door_and_counted() -> None:
    """Batch envelopes (``stormpy.worker.wire``) whose columns disagree are refused whole and
    counted as bad frames; a batch of acker messages failing the per-run check is checked
    message by message, so only its bad messages go."""
    port = free_port()
    runtime = CollectingRuntime({1, 2, 3})
    transfer = ZmqTransfer("127.0.0.1", port, bind_host="127.0.0.1")
    transfer.start(runtime)
    try:
        bad_batches = [
            [1, ["default", 7, 3], [[1], [2]], None],                 # runs count 3, values 2
            [1, ["default", 7, 1], [[1]], [1, [5, 6], [7, 8]]],        # 2 anchors for 1 message
            [1, ["default", 7, 2], [[1], [2]], [[2, 1], [5], [7]]],    # counts do not add up
            [1, ["default", "7", 1], [[1]], None],                    # source not a task id
            [1, [b"default", 7, 1], [[1]], None],                     # stream not a string
            [1, ["default", 7], [[1]], None],                         # runs not triples
            [1, "runs", [[1]], None],
        ]
        frames = [msgpack.packb([b]) for b in bad_batches]
        acker_batch = [2, [ACK_INIT, 7, 2, ACK_FAIL, 7, 2], [[1, 2, 7], [1, 2], [5], []], None]
        frames.append(msgpack.packb([acker_batch]))
        # messages of the wrong shape in a well-formed batch: only they are dropped
        frames.append(msgpack.packb([[2, ["default", 7, 4], [[1], 5, [2], [3]],
                                      [[0, 0, 1, 1], ["a", 1], [1, "b"]]]]))
        frames.append(msgpack.packb([[3, ["default", 7, 1, "other", 8, 1], [["a"], ["b"]], [[1, 0], [1], [2]]]]))
        _push(port, frames)
        wait_until(lambda: runtime.count(3) == 2, 20, "the good batch after the bad ones")
        assert transfer.counters["bad_frames"] == len(bad_batches)
        assert runtime.count(1) == 0
        assert runtime.received[2] == [(ACK_INIT, 7, (1, 2, 7), None), (ACK_FAIL, 7, (5,), None),
                                       ("default", 7, (1,), None)]
        assert transfer.counters["bad_messages"] == 2 + 3
        assert runtime.received[3] == [("default", 7, ("a",), (1, 2)), ("other", 8, ("b",), None)]
    finally:
        transfer.stop("test done")
