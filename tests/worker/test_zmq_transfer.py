"""ZeroMQ transport between two real processes: batching, local delivery, garbage, rerouting,
backpressure. The peer is ``transfer_peer.py``, which echoes task 2's batches back to task 1."""
from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
from pathlib import Path

import msgpack
import pytest
import zmq

from stormpy.testing import free_port, wait_until
from stormpy.worker.transfer import ZmqTransfer

PEER = Path(__file__).with_name("transfer_peer.py")


class CollectingRuntime:
    """Stands in for WorkerRuntime: records what the transport delivers (the sockets are real)."""

    def __init__(self, local_tasks: set[int]) -> None:
        self.local_tasks = local_tasks
        self.received: dict[int, list] = {}
        self.lock = threading.Lock()
        self.overloaded = False
        self.remote_bp: list[bool] = []

    def receive(self, task_id: int, messages: list) -> None:
        with self.lock:
            self.received.setdefault(task_id, []).extend(messages)

    def count(self, task_id: int) -> int:
        with self.lock:
            return len(self.received.get(task_id, []))

    def is_overloaded(self) -> bool:
        return self.overloaded

    def is_locally_overloaded(self) -> bool:
        return self.overloaded

    def set_remote_backpressure(self, on: bool) -> None:
        self.remote_bp.append(on)


class Peer:
    def __init__(self, port: int, my_port: int, flag: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, str(PEER), str(port), str(my_port), str(flag)],
                                     stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        wait_until(lambda: "READY" in self.lines or self.proc.poll() is not None, 20, "peer READY")
        assert self.proc.poll() is None, "peer process exited at start"

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def pair(tmp_path):
    my_port, peer_port = free_port(), free_port()
    flag = tmp_path / "overloaded"
    runtime = CollectingRuntime({1, 3})
    transfer = ZmqTransfer("127.0.0.1", my_port, bind_host="127.0.0.1")
    transfer.update_routes({1: ("127.0.0.1", my_port), 3: ("127.0.0.1", my_port),
                            2: ("127.0.0.1", peer_port)})
    transfer.start(runtime)
    peer = Peer(peer_port, my_port, flag)
    try:
        yield runtime, transfer, peer, peer_port, flag
    finally:
        peer.stop()
        transfer.stop("test done")


def test_round_trip_batches_and_local_delivery(pair):
    runtime, transfer, _peer, _port, _flag = pair
    total = 20000
    for start in range(0, total, 100):
        batch = [("default", 1, [f"w{i}", i], (i, i * 7) if i % 2 else None) for i in range(start, start + 100)]
        transfer.send(2, batch)
    transfer.send(3, [("default", 1, ["local"], None)])
    wait_until(lambda: runtime.count(1) == total, 30, f"{total} echoed messages for task 1")
    assert runtime.received[3] == [("default", 1, ["local"], None)]     # local: untouched, no socket
    got = runtime.received[1]
    # over the wire messages arrive as tuples, values as tuples too (msgpack use_list=False)
    assert got[0] == ("default", 2, ("w0", 0), None)
    assert got[1] == ("default", 2, ("w1", 1), (1, 7))
    assert sorted(m[2][1] for m in got) == list(range(total))
    # batching: far fewer frames than messages went out
    assert transfer.counters["sent_frames"] < total / 5


def test_send_many_hands_a_round_of_batches_over_at_once(pair):
    """The executor loop's hand-over: several batches in one queue item, remote ones leave in
    one frame per peer, local ones are delivered at once, nothing is lost."""
    runtime, transfer, _peer, _port, _flag = pair
    rounds, per_round = 50, 10
    for r in range(rounds):
        transfer.send_many([(2, [("default", 1, [r * per_round + i], (i, i))]) for i in range(per_round)])
    transfer.send_many([(2, [("default", 1, [-1], None)]), (3, [("default", 1, ["local"], None)])])
    total = rounds * per_round + 1
    wait_until(lambda: runtime.count(1) == total, 30, f"{total} echoed messages for task 1")
    assert runtime.received[3] == [("default", 1, ["local"], None)]
    assert sorted(m[2][0] for m in runtime.received[1]) == list(range(-1, rounds * per_round))
    assert transfer.counters["sent_frames"] <= rounds + 1 < total   # a round's batches share a frame
    assert not transfer.is_backlogged()


def test_send_many_packs_on_the_calling_thread(pair):
    """The loop's rounds are packed by the loop itself: an unserializable value is reported
    before ``send_many`` returns (the send thread only writes frames); the rest is sent."""
    runtime, transfer, _peer, _port, _flag = pair
    errors: list[tuple[int, str, int]] = []
    transfer._report_error = lambda task, text: errors.append((task, text, threading.get_ident()))
    transfer.send_many([(2, [("default", 5, [object()], None), ("default", 5, ["ok"], None)]),
                        (2, [("default", 5, ["also ok"], None)])])
    assert [(task, thread) for task, _text, thread in errors] == [(5, threading.get_ident())]
    assert "serialize" in errors[0][1]
    wait_until(lambda: runtime.count(1) == 2, 20, "the two serializable messages' echoes")
    assert sorted(m[2][0] for m in runtime.received[1]) == ["also ok", "ok"]


def test_send_many_routes_by_the_newest_map_before_the_send_thread_ran(tmp_path):
    """``update_routes`` takes effect at once for the loop's own routing (``send_many`` routes
    on the calling thread): a round sent before the send thread applied the map is delivered."""
    my_port, peer_port = free_port(), free_port()
    runtime = CollectingRuntime({1})
    transfer = ZmqTransfer("127.0.0.1", my_port, bind_host="127.0.0.1")
    transfer.update_routes({1: ("127.0.0.1", my_port), 2: ("127.0.0.1", peer_port)})
    transfer.send_many([(2, [("default", 1, ["routed"], None)])])   # no send thread yet
    assert transfer.counters["unroutable_messages"] == 0
    peer = Peer(peer_port, my_port, tmp_path / "no-flag")
    transfer.start(runtime)
    try:
        wait_until(lambda: runtime.count(1) == 1, 20, "the echo of the round sent before start")
        assert list(runtime.received[1][0][2]) == ["routed"]
    finally:
        peer.stop()
        transfer.stop("test done")


def test_frames_packed_for_a_peer_the_routes_dropped_are_counted_not_sent(caplog):
    """A round packed while its peer was still assigned, reaching the send thread after the
    routes changed: dropped and counted (the spout replays), no socket to the old peer."""
    runtime = CollectingRuntime({1})
    transfer = ZmqTransfer("127.0.0.1", free_port(), bind_host="127.0.0.1")
    gone, other = ("127.0.0.1", free_port()), ("127.0.0.1", free_port())
    transfer.update_routes({1: transfer.me, 2: gone})
    transfer.send_many([(2, [("default", 1, [i], None) for i in range(3)])])   # packed for `gone`
    transfer.update_routes({1: transfer.me, 2: other})
    caplog.set_level(logging.INFO, logger="stormpy.worker.transfer")
    transfer.start(runtime)
    try:
        wait_until(lambda: transfer.counters["unroutable_messages"] == 3, 10, "the stale frame's drop")
        wait_until(lambda: f"connected to worker 127.0.0.1:{other[1]}" in caplog.text, 10, "the new peer's socket")
        assert transfer.counters["sent_messages"] == 0
        assert f"worker 127.0.0.1:{gone[1]}, no longer assigned" in caplog.text
        assert f"connected to worker 127.0.0.1:{gone[1]}" not in caplog.text   # the stale map applied no peer
    finally:
        transfer.stop("test done")


def test_garbage_frames_are_dropped_not_fatal(pair):
    runtime, transfer, peer, peer_port, _flag = pair
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 1000)
    push.connect(f"tcp://127.0.0.1:{peer_port}")
    for junk in (b"", b"\xc1\xff\x00garbage", msgpack.packb({"a": 1}), msgpack.packb([[2, [[1, 2]]]]),
                 msgpack.packb([["x", []]]), msgpack.packb([[-1, [["nonsense", 1]]]])):
        push.send(junk)
    push.close()
    ctx.term()
    with socket.create_connection(("127.0.0.1", peer_port)) as raw:   # not even ZMTP
        raw.sendall(b"GET / HTTP/1.0\r\n\r\n" + bytes(range(256)))
    transfer.send(2, [("default", 1, ["after"], None)])
    wait_until(lambda: runtime.count(1) == 1, 20, "the echo of a good batch after garbage")
    assert peer.proc.poll() is None


def test_unserializable_value_is_reported_and_the_rest_sent(tmp_path):
    my_port, peer_port = free_port(), free_port()
    errors: list[tuple[int, str]] = []
    runtime = CollectingRuntime({1})
    transfer = ZmqTransfer("127.0.0.1", my_port, bind_host="127.0.0.1",
                           report_error=lambda task, text: errors.append((task, text)))
    transfer.update_routes({1: ("127.0.0.1", my_port), 2: ("127.0.0.1", peer_port)})
    transfer.start(runtime)
    peer = Peer(peer_port, my_port, tmp_path / "no-flag")
    try:
        transfer.send(2, [("default", 1, [object()], None), ("default", 1, ["ok"], None)])
        wait_until(lambda: runtime.count(1) == 1, 20, "the serializable message's echo")
        assert errors and errors[0][0] == 1 and "serialize" in errors[0][1]
    finally:
        peer.stop()
        transfer.stop("test done")


def test_reroute_when_a_task_moves(pair, tmp_path):
    runtime, transfer, peer, _port, _flag = pair
    transfer.send(2, [("default", 1, ["first"], None)])
    wait_until(lambda: runtime.count(1) == 1, 20, "echo from the first peer")
    new_port = free_port()
    peer2 = Peer(new_port, transfer.port, tmp_path / "no-flag")
    try:
        peer.stop()
        transfer.update_routes({1: ("127.0.0.1", transfer.port), 3: ("127.0.0.1", transfer.port),
                                2: ("127.0.0.1", new_port)})
        transfer.send(2, [("default", 1, ["second"], None)])
        wait_until(lambda: runtime.count(1) == 2, 20, "echo from the peer task 2 moved to")
        assert list(runtime.received[1][1][2]) == ["second"]
    finally:
        peer2.stop()


def test_backpressure_signal_reaches_upstream(pair):
    runtime, transfer, peer, _port, flag = pair
    transfer.send(2, [("default", 1, ["hello"], None)])   # peer now knows us
    wait_until(lambda: runtime.count(1) == 1, 20, "first echo")
    flag.touch()
    wait_until(lambda: runtime.remote_bp[-1:] == [True], 20, "backpressure ON from the peer")
    flag.unlink()
    wait_until(lambda: runtime.remote_bp[-1:] == [False], 20, "backpressure OFF from the peer")
    # and the other direction: our overload throttles the peer's spouts
    runtime.overloaded = True
    wait_until(lambda: "BP True" in peer.lines, 20, "peer told of our backpressure")
    runtime.overloaded = False
    wait_until(lambda: "BP False" in peer.lines, 20, "peer told backpressure is off")


def test_unroutable_task_is_dropped(pair):
    runtime, transfer, _peer, _port, _flag = pair
    transfer.send(99, [("default", 1, ["nowhere"], None)])
    wait_until(lambda: transfer.counters["unroutable_messages"] == 1, 10, "the drop to be counted")
