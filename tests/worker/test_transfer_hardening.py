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
