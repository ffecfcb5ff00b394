"""Tuple-tree ids (``stormpy.task.tree``): compiled they come from a splitmix64 generator in C,
interpreted from ``random.getrandbits``; either way random 64-bit ints, repeatable after
``seed_ids`` and fresh in a forked child. Run interpreted by the suite and compiled by
``.ci/run``'s compiled step."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from stormpy.task import tree
from stormpy.task.tree import Hand, Ticks, next_id, seed_ids

REPO = Path(__file__).resolve().parents[2]


def _compiled() -> bool:
    return tree.__file__.endswith(".so")


def test_the_generator_is_splitmix64() -> None:
    """The published first outputs of splitmix64 from state 0; compiled, the emit paths draw
    exactly these (interpreted, the same function in Python ints, which they do not use)."""
    seed_ids(0)
    draw = next_id if _compiled() else tree._draw
    assert [draw() for _ in range(3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_ids_are_random_64_bit_ints_and_repeat_after_a_seed() -> None:
    seed_ids(7)
    first = [next_id() for _ in range(1000)]
    assert all(type(i) is int and 0 <= i < 2**64 for i in first)
    assert len(set(first)) == 1000 and max(first) > 2**60
    seed_ids(7)
    assert [next_id() for _ in range(1000)] == first
    seed_ids(8)
    assert next_id() != first[0]


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    seed_ids(11)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: its next id, then exit without running the test machinery
        try:
            os.write(write, next_id().to_bytes(8, "little"))
        finally:
            os._exit(0)
    os.close(write)
    child = int.from_bytes(os.read(read, 8), "little")
    os.close(read)
    os.waitpid(pid, 0)
    assert child != next_id(), "the child reseeds after fork, as random does"


@pytest.mark.parametrize("cls", [Hand, Ticks])
def test_the_cdef_class_declarations_name_their_slots(cls: type) -> None:
    """``task/tree.pxd`` declares the compiled Hand's and Ticks' C fields; a slot added to the
    class and not there would exist only interpreted."""
    pxd = (REPO / "stormpy" / "task" / "tree.pxd").read_text()
    block = pxd.split(f"cdef class {cls.__name__}:", 1)[1].split("\n\n", 1)[0]
    fields = [line.split()[-1] for line in block.splitlines() if line.strip().startswith("cdef public")]
    assert sorted(fields) == sorted(cls.__slots__)


def test_ticks_count_as_a_list_of_none_does() -> None:
    """Compiled, the fast emits count into :class:`Ticks`; interpreted into a list. The fold
    reads both alike."""
    for ticks in (Ticks(), []):
        for _ in range(3):
            ticks.append(None)
        assert len(ticks) == 3
        ticks.clear()
        assert len(ticks) == 0


def test_a_hand_keeps_64_bit_edges() -> None:
    hand = Hand()
    hand.edges ^= 2**64 - 1
    hand.edges ^= 5
    assert hand.edges == 2**64 - 1 - 5
    hand.roots = (1, 2)
    hand.clear()
    assert hand.roots is None and hand.edges == 0
