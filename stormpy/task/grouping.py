"""Routing: from the Thrift ``Grouping`` of each subscriber to the task ids a tuple goes to.

Each emitting task builds its own routes once (``build_routes``) and then, per tuple, calls
one small closure: ``select(values) -> list[int]``. The lists returned are shared and must not
be mutated; that keeps the per-tuple path free of allocations for the common groupings.

Fields grouping hashes ``msgpack([field values...])`` with CRC-32, never Python's salted
``hash()``, so the same value reaches the same task in every process (local runner or any
worker of a cluster). Partial-key grouping is Storm's PartialKeyGrouping: two candidate tasks
from two hashes, the one this task has sent fewer tuples to wins.
"""
from __future__ import annotations

import itertools
import logging
import operator
import pickle
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stormpy.serialization import stable_key_bytes

log = logging.getLogger(__name__)

Selector = Callable[[Sequence[Any]], list[int]]
EMPTY: list[int] = []
_CACHE_LIMIT = 1 << 16
_PARTIAL_KEY_SEED = 0x5BD1E995
_CACHEABLE = frozenset({str, int})


def grouping_kind(grouping: Any) -> str:
    """The name of the member set in a Thrift Grouping union ("fields", "shuffle", ...)."""
    for name in ("fields", "shuffle", "all", "none", "direct", "custom_object",
                 "custom_serialized", "local_or_shuffle", "partial_key"):
        if getattr(grouping, name, None) is not None:
            return name
    raise ValueError(f"empty Grouping {grouping!r}")


def fields_hash(key_values: Sequence[Any]) -> int:
    """Stable hash of the grouping fields' values (same in every process and Python run)."""
    return zlib.crc32(stable_key_bytes(list(key_values)))


def shuffle_selector(tasks: Sequence[int], rng: random.Random) -> Selector:
    """Storm 2's ShuffleGrouping: the targets in a random order (drawn once per emitting task),
    then round-robin over that order: every target gets the same share, and no random draw
    or reshuffle is paid per tuple (a reshuffle per round of two targets cost a spout's emit
    as much as the rest of routing)."""
    choices = [[t] for t in tasks]
    if len(choices) == 1:
        only = choices[0]
        return lambda values: only
    rng.shuffle(choices)
    following = itertools.cycle(choices)
    # next(): a direct call of the cycle's C next; a bound ``__next__`` is a method-wrapper,
    # called through its generic slot wrapper (~90 machine instructions more a tuple, compiled)
    return lambda values: next(following)


def fields_selector(tasks: Sequence[int], indexes: list[int]) -> Selector:
    """Same field values -> same task; single str/int keys are cached per emitting task."""
    choices = [[t] for t in tasks]
    n = len(choices)
    if len(indexes) == 1:
        (index,) = indexes
        cache: dict[Any, list[int]] = {}
        cache_get = cache.get   # bound once (compiled, ``cache.get(key)`` is a by-name method call)

        def select_one(values: Sequence[Any]) -> list[int]:
            key = values[index]
            kind = type(key)
            if kind is str or kind is int:
                hit = cache_get(key)
                if hit is None:
                    if len(cache) >= _CACHE_LIMIT:
                        cache.clear()
                    hit = cache[key] = choices[zlib.crc32(stable_key_bytes([key])) % n]
                return hit
            return choices[zlib.crc32(stable_key_bytes([key])) % n]

        # Emit fast paths look str keys up in the cache themselves (a call saved per tuple)
        # and call select_one only on a miss; select_one alone fills and clears the cache.
        select_one.key_index = index  # type: ignore[attr-defined]
        select_one.key_cache = cache  # type: ignore[attr-defined]
        return select_one

    key_of = operator.itemgetter(*indexes)
    many_cache: dict[tuple[Any, ...], list[int]] = {}

    def select_many(values: Sequence[Any]) -> list[int]:
        # Keys of str and int fields only are cached (computed once per key and emitting
        # task): 1, 1.0 and True are equal dict keys but hash to different tasks.
        key = key_of(values)
        hit = many_cache.get(key) if set(map(type, key)) <= _CACHEABLE else None
        if hit is None:
            hit = choices[zlib.crc32(stable_key_bytes(list(key))) % n]
            if set(map(type, key)) <= _CACHEABLE:
                if len(many_cache) >= _CACHE_LIMIT:
                    many_cache.clear()
                many_cache[key] = hit
        return hit

    return select_many


def partial_key_selector(tasks: Sequence[int], indexes: list[int]) -> Selector:
    """Two hash choices per key; pick the one with the lower count sent from this task."""
    choices = [[t] for t in tasks]
    n = len(choices)
    counts = [0] * n

    def select(values: Sequence[Any]) -> list[int]:
        data = stable_key_bytes([values[i] for i in indexes])
        first = zlib.crc32(data) % n
        second = zlib.crc32(data, _PARTIAL_KEY_SEED) % n
        pick = second if counts[first] > counts[second] else first
        counts[pick] += 1
        return choices[pick]

    return select


def local_or_shuffle_selector(tasks: Sequence[int], local_tasks: set[int], rng: random.Random) -> Selector:
    """Shuffle among the targets in this worker; all targets only when none is local."""
    local = [t for t in tasks if t in local_tasks]
    return shuffle_selector(local or list(tasks), rng)


def custom_selector(obj: Any, context: Any, source: tuple[str, str], tasks: Sequence[int]) -> Selector:
    """A user grouping object: ``prepare(context, stream, targets)``, ``choose_tasks(task, values)``."""
    from stormpy.thrift import storm

    obj.prepare(context, storm.GlobalStreamId(componentId=source[0], streamId=source[1]), list(tasks))
    task_id = context.task_id if context is not None else 0
    choose = obj.choose_tasks

    def select(values: Sequence[Any]) -> list[int]:
        return list(choose(task_id, list(values)))

    return select


def _load_custom(grouping: Any) -> Any:
    if grouping.custom_serialized is not None:
        return pickle.loads(grouping.custom_serialized)
    pyobj = grouping.custom_object
    if pyobj.serialized:
        return pickle.loads(pyobj.serialized)
    from stormpy.serialization import _load_class

    return _load_class(pyobj.class_name)()


def make_selector(grouping: Any, *, tasks: Sequence[int], out_fields: Sequence[str], source: tuple[str, str],
                  context: Any = None, local_tasks: set[int] | frozenset[int] = frozenset(),
                  rng: random.Random | None = None) -> Selector | None:
    """The selector for one subscriber, or None for direct grouping (the emitter names the task)."""
    tasks = sorted(tasks)
    rng = rng or random.Random()
    kind = grouping_kind(grouping)
    if kind == "fields" or kind == "partial_key":
        names = grouping.fields if kind == "fields" else grouping.partial_key
        if not names:  # Storm: fields grouping with no fields is global grouping
            only = [tasks[0]]
            return lambda values: only
        fields = list(out_fields)
        indexes = [fields.index(name) for name in names]
        return fields_selector(tasks, indexes) if kind == "fields" else partial_key_selector(tasks, indexes)
    if kind in ("shuffle", "none"):
        return shuffle_selector(tasks, rng)
    if kind == "all":
        return lambda values: tasks
    if kind == "direct":
        return None
    if kind == "local_or_shuffle":
        return local_or_shuffle_selector(tasks, set(local_tasks), rng)
    return custom_selector(_load_custom(grouping), context, source, tasks)


@dataclass
class Route:
    """Where one stream of one emitting task goes."""

    stream: str
    num_fields: int
    direct: bool
    select: Selector
    direct_tasks: frozenset[int] = field(default_factory=frozenset)


def _combine(selectors: list[Selector]) -> Selector:
    if not selectors:
        return lambda values: EMPTY
    if len(selectors) == 1:
        return selectors[0]
    if len(selectors) == 2:
        first, second = selectors
        return lambda values: first(values) + second(values)

    def select(values: Sequence[Any]) -> list[int]:
        out: list[int] = []
        for sel in selectors:
            out += sel(values)
        return out

    return select


def build_routes(plan: Any, component_id: str, context: Any = None,
                 local_tasks: set[int] | frozenset[int] = frozenset(),
                 rng: random.Random | None = None) -> dict[str, Route]:
    """Routes for every declared stream of ``component_id`` (one call per emitting task)."""
    rng = rng or random.Random()
    comp = plan.components[component_id]
    routes: dict[str, Route] = {}
    for stream_id, stream_def in comp.streams.items():
        selectors: list[Selector] = []
        direct_tasks: set[int] = set()
        for target_id, grouping in plan.subscribers(component_id, stream_id):
            target_tasks = plan.components[target_id].tasks
            sel = make_selector(grouping, tasks=target_tasks, out_fields=stream_def.fields,
                                source=(component_id, stream_id), context=context,
                                local_tasks=local_tasks, rng=rng)
            if sel is None:
                direct_tasks.update(target_tasks)
            else:
                selectors.append(sel)
        routes[stream_id] = Route(stream_id, len(stream_def.fields), bool(stream_def.direct),
                                  _combine(selectors), frozenset(direct_tasks))
    return routes
