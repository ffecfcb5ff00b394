"""Grouping contracts, tested on the selectors each emitting task builds (no threads needed)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter

from stormpy.task.grouping import make_selector
from stormpy.thrift import storm

TASKS = [4, 5, 6, 7, 8]
VALUES = ["apple", "banana", "cherry", "ñandú", "", 0, 1, 12345678901, -3, 2.5, True, None,
          ["nested", 1], b"raw"]

_CHILD = """
import json, sys
from stormpy.task.grouping import make_selector
from stormpy.thrift import storm
values = json.loads(sys.argv[1])
values[-1] = b"raw"
sel = make_selector(storm.Grouping(fields=["k"]), tasks=[4, 5, 6, 7, 8], out_fields=["k", "x"], source=("s", "default"))
print(json.dumps([sel([v, 0])[0] for v in values]))
"""


def fields(*names: str) -> object:
    return storm.Grouping(fields=list(names))


def test_fields_grouping_is_stable_across_processes_with_different_hash_seeds() -> None:
    sel = make_selector(fields("k"), tasks=TASKS, out_fields=["k", "x"], source=("s", "default"))
    here = [sel([v, 0])[0] for v in VALUES]
    assert here == [sel([v, 1])[0] for v in VALUES], "other fields must not matter"
    encoded = json.dumps(VALUES[:-1] + ["placeholder"])
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", _CHILD, encoded], env=env, capture_output=True,
                             text=True, timeout=120, check=True)
        assert json.loads(out.stdout) == here, f"PYTHONHASHSEED={seed} routed differently"


def test_fields_grouping_spreads_keys_and_uses_several_fields() -> None:
    sel = make_selector(fields("a", "b"), tasks=TASKS, out_fields=["a", "b"], source=("s", "default"))
    counts = Counter(sel([f"user{i}", i % 3])[0] for i in range(5000))
    assert set(counts) == set(TASKS)
    assert min(counts.values()) > 5000 / len(TASKS) / 2
    assert sel(["x", 1]) == sel(["x", 1])


def test_fields_grouping_on_several_fields_caches_without_mixing_equal_keys_of_other_types() -> None:
    """Several-field keys of str and int are hashed once per emitting task; 1, 1.0 and True
    compare equal but must still go where a fresh process sends them."""
    keys = [["x", 1], ["x", 1.0], ["x", True], ["y", 2], [b"z", 3], ["x", [1]], ["x", 1]]
    fresh = [make_selector(fields("a", "b"), tasks=list(range(1, 101)), out_fields=["a", "b"],
                           source=("s", "default"))(k)[0] for k in keys]
    sel = make_selector(fields("a", "b"), tasks=list(range(1, 101)), out_fields=["a", "b"], source=("s", "default"))
    for _ in range(3):
        assert [sel(k)[0] for k in keys] == fresh
    assert len({fresh[0], fresh[1], fresh[2]}) > 1, "the key types must matter (else the test proves nothing)"


def test_global_grouping_picks_the_lowest_task() -> None:
    sel = make_selector(storm.Grouping(fields=[]), tasks=[9, 3, 7], out_fields=["a"], source=("s", "default"))
    assert {sel([i])[0] for i in range(100)} == {3}


def test_all_grouping_reaches_every_task() -> None:
    sel = make_selector(storm.Grouping(all=storm.NullStruct()), tasks=[3, 1, 2], out_fields=["a"],
                        source=("s", "default"))
    assert sel(["x"]) == [1, 2, 3]


def test_shuffle_grouping_is_even_per_round() -> None:
    sel = make_selector(storm.Grouping(shuffle=storm.NullStruct()), tasks=TASKS, out_fields=["a"],
                        source=("s", "default"), rng=random.Random(3))
    counts = Counter(sel(["x"])[0] for _ in range(len(TASKS) * 100))
    assert set(counts.values()) == {100}


def test_direct_grouping_has_no_selector() -> None:
    assert make_selector(storm.Grouping(direct=storm.NullStruct()), tasks=TASKS, out_fields=["a"],
                         source=("s", "default")) is None


def test_local_or_shuffle_prefers_local_tasks() -> None:
    grouping = storm.Grouping(local_or_shuffle=storm.NullStruct())
    sel = make_selector(grouping, tasks=TASKS, out_fields=["a"], source=("s", "default"), local_tasks={5, 8, 99})
    assert {sel(["x"])[0] for _ in range(100)} == {5, 8}
    remote = make_selector(grouping, tasks=TASKS, out_fields=["a"], source=("s", "default"), local_tasks={99})
    assert {remote(["x"])[0] for _ in range(100)} == set(TASKS)


def test_partial_key_grouping_balances_a_skewed_key() -> None:
    tasks = [1, 2, 3, 4]
    grouping = storm.Grouping(partial_key=["k"])
    pk = make_selector(grouping, tasks=tasks, out_fields=["k"], source=("s", "default"))
    fg = make_selector(fields("k"), tasks=tasks, out_fields=["k"], source=("s", "default"))
    keys = ["hot"] * 5000 + [f"k{i}" for i in range(5000)]
    random.Random(5).shuffle(keys)
    pk_counts = Counter(pk([k])[0] for k in keys)
    fg_counts = Counter(fg([k])[0] for k in keys)
    # The hot key is split over its two candidates, so the busiest task carries less.
    assert max(pk_counts.values()) < max(fg_counts.values())
    assert {pk(["hot"])[0] for _ in range(100)} <= set(tasks) and len({pk(["hot"])[0] for _ in range(100)}) == 2


class EvenOdd:
    """A custom grouping: even numbers to the first target, odd to the last."""

    def prepare(self, context: object, stream: object, targets: list[int]) -> None:
        self.targets = targets

    def choose_tasks(self, task_id: int, values: list[object]) -> list[int]:
        return [self.targets[0] if values[0] % 2 == 0 else self.targets[-1]]


def test_custom_grouping_object_is_prepared_and_asked() -> None:
    import pickle

    grouping = storm.Grouping(custom_serialized=pickle.dumps(EvenOdd()))
    sel = make_selector(grouping, tasks=[7, 3, 5], out_fields=["n"], source=("s", "default"))
    assert sel([2]) == [3] and sel([3]) == [7]
