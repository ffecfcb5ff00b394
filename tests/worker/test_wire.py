"""The batch wire format (``stormpy.worker.wire``): what goes in comes out, column by column
(issue 24)."""
from __future__ import annotations

import msgpack
import pytest

from stormpy.streams import ACK_ACK, ACK_INIT
from stormpy.worker import wire


def _round_trip(messages: list) -> tuple[tuple, list, bool]:
    envelope = wire.encode(4, messages)
    frame = msgpack.packb([envelope], use_bin_type=True)
    (received,) = msgpack.unpackb(frame, strict_map_key=False, raw=False, use_list=False)
    if len(received) != 4:
        return envelope, list(received[1]), True
    decoded, check_each = wire.decode(received)
    return envelope, decoded, check_each


def test_one_run_one_root_each() -> None:
    messages = [("default", 7, [f"w{i}"], (i, i * 3)) for i in range(100)]
    envelope, decoded, check_each = _round_trip(messages)
    assert envelope[1] == ["default", 7, 100]            # stream and source once
    assert envelope[3] == [1, list(range(100)), [i * 3 for i in range(100)]]
    assert decoded == [("default", 7, (f"w{i}",), (i, i * 3)) for i in range(100)]
    assert not check_each


def test_runs_mixed_anchors_and_acker_streams() -> None:
    messages = [("default", 7, ["a"], None), ("default", 7, ["b"], (1, 2, 3, 4)), ("s", 7, [], ()),
                (ACK_INIT, 5, [9, 8, 5, 10, 11, 5], None), (ACK_ACK, 6, [1, 2], None),
                ("default", 7, ["c"], (2**64 - 1, 0))]
    envelope, decoded, check_each = _round_trip(messages)
    assert len(envelope) == 4 and envelope[1][2::3] == [2, 1, 1, 1, 1]
    assert decoded == [(s, src, tuple(v), a or None) for s, src, v, a in messages]   # () is None
    assert not check_each                       # the acker runs passed their check


def test_as_many_roots_as_messages_but_not_one_each() -> None:
    """n roots for n anchored messages is one root each only if no message has none: an
    empty anchor tuple among longer ones must not shift the columns."""
    for anchors in ([(1, 2, 3, 4), ()], [(), (1, 2, 3, 4)], [(1, 2, 3, 4), (), (3, 5)]):
        messages = [("default", 7, [str(i)], a) for i, a in enumerate(anchors)]
        envelope, decoded, _check_each = _round_trip(messages)
        assert envelope[3][0] == [len(a) // 2 for a in anchors]
        assert decoded == [(s, src, tuple(v), a or None) for s, src, v, a in messages]


def test_anchors_that_are_not_pairs_go_as_messages() -> None:
    for anchors in ([5, 6], {5: 6}, (5,), (1, 2, 3)):
        envelope, _decoded, check_each = _round_trip([("default", 7, ["a"], anchors)])
        assert len(envelope) == 2 and check_each


def test_an_acker_run_failing_its_check_asks_for_the_message_check() -> None:
    _envelope, decoded, check_each = _round_trip([(ACK_INIT, 5, [9, 8], None)])   # not a triple
    assert check_each and decoded == [(ACK_INIT, 5, (9, 8), None)]


def test_batches_that_do_not_fit_the_columns_go_as_messages() -> None:
    for messages in ([("default", 7, ["a"])], [(1, 7, ["a"], None)], [("default", "7", ["a"], None)],
                     [("default", 7, ["a"], None), ("default", "x", ["b"], None)]):
        envelope, decoded, check_each = _round_trip(messages)
        assert len(envelope) == 2 and check_each
        assert [tuple(m) for m in decoded] == [tuple(tuple(x) if isinstance(x, list) else x for x in m)
                                               for m in messages]


@pytest.mark.parametrize("envelope", [
    (1, ["default", 7, 2], (("a",),), None),
    (1, ["default", 7, 1], (("a",),), (1, (1, 2), (3, 4))),           # 2 anchors for 1 message
    (1, ["default", 7, 1], (("a",),), (1, (1,), ())),                 # roots without edges
    (1, ["default", 7, 2], (("a",), ("b",)), ((1, 1, 1), (1, 2, 3), (4, 5, 6))),
    (1, ["default", 7, 2], (("a",), ("b",)), ((2, 1), (1, 2), (4, 5))),
    (1, ["default", 7, 1], (("a",),), ((-1,), (), ())),
    (1, ["default", 7, 1], (("a",),), (None, None)),
    (1, ["default", 7, 0], (), None),
    (1, ["default", 7], (("a",),), None),
    (1, ("default", 7, 1), "abc", None),
])
def test_columns_that_disagree_are_refused(envelope: tuple) -> None:
    with pytest.raises(wire.BadBatch):
        wire.decode(envelope)


@pytest.mark.parametrize("envelope", [
    (1, ["default", 7, 1], ("a",), None),
    (1, ["default", 7, 1], (("a",),), (1, (1,), (1.5,))),
    (1, ["default", 7, 1], (("a",),), (1, ("x",), (1,))),
    (1, ["default", 7, 1], (("a",),), ((1,), (True,), (1,))),
    (1, ["default", 7, 1], (("a",),), (1, ([1],), (2,))),           # a root that is not an id
])
def test_a_message_of_the_wrong_shape_asks_for_the_message_check(envelope: tuple) -> None:
    _messages, check_each = wire.decode(envelope)
    assert check_each
