"""An executor's outgoing batches (``emit.Outbox``): compiled, a destination's next batch is made
with room for its last one (``capi.pxd``), so that filling it never copies it to a larger block.
Run interpreted by the suite and compiled by ``.ci/run``'s compiled step."""
from __future__ import annotations

import sys
from typing import Any

from stormpy.task import tuple_path_build
from stormpy.task.emit import Outbox

COMPILED = tuple_path_build() != "pure Python"


def _room(items: list[Any]) -> int:
    """The item slots a list has (``sys.getsizeof`` counts them, not its length)."""
    return (sys.getsizeof(items) - sys.getsizeof([])) // 8


def test_a_destination_s_next_batch_has_room_for_its_last_one_and_keeps_it() -> None:
    sent: list[tuple[int, list[Any]]] = []
    outbox = Outbox(lambda dest, messages: sent.append((dest, messages)), 1000, "test")
    messages = [("default", 1, [i], None) for i in range(100)]
    for message in messages:
        outbox.add(7, message)
    outbox.flush()
    assert sent == [(7, messages)] and outbox.sizes == {7: 100}
    for message in messages[:120 - 100] + messages:   # 120 messages: a fifth more than the last batch
        outbox.add(7, message)
    box = outbox.boxes[7]
    assert len(box) == 120 and box[:20] == messages[:20] and box[20:] == messages
    if COMPILED:   # made with room for 100 + 25 + 8, and not grown (appends into a list less than
        assert _room(box) == 133   # half full would have given the room back)
    outbox.add_to_each([7, 8], ("default", 1, ["x"], None))
    outbox.flush()
    assert [(dest, len(batch)) for dest, batch in sent[1:]] == [(7, 121), (8, 1)]
    assert outbox.sizes == {7: 121, 8: 1} and not outbox.boxes


def test_a_batch_is_sent_when_full_and_the_next_one_has_bounded_room() -> None:
    sent: list[tuple[int, list[Any]]] = []
    outbox = Outbox(lambda dest, messages: sent.append((dest, messages)), 10, "test")
    for i in range(25):
        outbox.add(3, ("default", 1, [i], None))
    assert [len(batch) for _dest, batch in sent] == [10, 10] and len(outbox.boxes[3]) == 5
    if COMPILED:
        assert _room(outbox.boxes[3]) == 10   # never more than batch_size
