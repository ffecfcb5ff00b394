"""What Trident users subclass to process tuples (DESIGN 7.1): functions, filters, aggregators.

Also the runtime-side normalization of those: :func:`as_function` / :func:`as_filter` accept a
plain callable (``f(tup, collector)`` / ``f(tup) -> bool``) as PySpark users expect, and
:func:`batch_aggregator` turns any of the three aggregator kinds into the one shape the
processors run (``init(batch_id, collector) -> state``, ``aggregate``, ``complete``).

Everything here runs on the executor thread of the bolt that holds the operation.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)


class TridentTuple:
    """The values an operation sees, by position (``tup[0]``) or field name (``tup["word"]``).

    Read-only, as Storm's TridentTuple: ``values`` may be the very list the previous step
    emitted (no copy per tuple), so writing into it would change what later steps see.
    """

    __slots__ = ("values", "_index")

    def __init__(self, values: Sequence[Any], index: Mapping[str, int]) -> None:
        self.values = values
        self._index = index

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            try:
                return self.values[self._index[key]]
            except KeyError:
                raise KeyError(f"field {key!r} is not in this tuple (fields: {', '.join(self._index)})") from None
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Any:
        return iter(self.values)

    @property
    def fields(self) -> list[str]:
        return list(self._index)

    def get(self, name: str, default: Any = None) -> Any:
        i = self._index.get(name)
        return default if i is None else self.values[i]

    def __repr__(self) -> str:
        return f"TridentTuple({dict(zip(self._index, self.values))!r})"


class Operation:
    """Base of every user operation: optional ``prepare(conf, context)`` and ``cleanup()``."""

    def prepare(self, conf: Mapping[str, Any], context: Any) -> None:
        """Called once per task before the first batch."""

    def cleanup(self) -> None:
        """Called when the task stops."""


class Function(Operation):
    """``each(fields, function, out_fields)``: emits zero or more value lists per tuple."""

    def execute(self, tup: TridentTuple, collector: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}.execute(tup, collector)")


class Filter(Operation):
    """``each(fields, filter)``: keeps the tuples for which ``is_keep`` is true."""

    def is_keep(self, tup: TridentTuple) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.is_keep(tup)")


class CombinerAggregator(Operation):
    """``init(tup)`` per tuple, ``combine(a, b)`` pairwise, ``zero()`` for an empty input."""

    def init(self, tup: TridentTuple) -> Any:
        raise NotImplementedError

    def combine(self, val1: Any, val2: Any) -> Any:
        raise NotImplementedError

    def zero(self) -> Any:
        raise NotImplementedError


class ReducerAggregator(Operation):
    """``init()`` once, then ``reduce(curr, tup)`` per tuple."""

    def init(self) -> Any:
        raise NotImplementedError

    def reduce(self, curr: Any, tup: TridentTuple) -> Any:
        raise NotImplementedError


class Aggregator(Operation):
    """The general form: ``init(batch_id, collector) -> state``, ``aggregate``, ``complete``."""

    def init(self, batch_id: Any, collector: Any) -> Any:
        raise NotImplementedError

    def aggregate(self, state: Any, tup: TridentTuple, collector: Any) -> None:
        raise NotImplementedError

    def complete(self, state: Any, collector: Any) -> None:
        raise NotImplementedError


class Count(CombinerAggregator):
    """How many tuples."""

    def init(self, tup: TridentTuple) -> int:
        return 1

    def combine(self, val1: int, val2: int) -> int:
        return val1 + val2

    def zero(self) -> int:
        return 0


class Sum(CombinerAggregator):
    """The sum of the first input field."""

    def init(self, tup: TridentTuple) -> Any:
        return tup[0]

    def combine(self, val1: Any, val2: Any) -> Any:
        return val1 + val2

    def zero(self) -> Any:
        return 0


class QueryFunction(Operation):
    """``state_query``: ``batch_retrieve(state, tuples) -> results``, then ``execute`` per tuple."""

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list[Any]:
        raise NotImplementedError

    def execute(self, tup: TridentTuple, result: Any, collector: Any) -> None:
        raise NotImplementedError


class MapGet(QueryFunction):
    """Reads a MapState: the key is the input fields' values; emits the stored value (or None)."""

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list[Any]:
        return state.multi_get([tuple(t.values) for t in tuples])

    def execute(self, tup: TridentTuple, result: Any, collector: Any) -> None:
        collector.emit([result])


# ------------------------------------------------------------------ runtime normalization
class _CallableFunction(Function):
    def __init__(self, fn: Callable[[TridentTuple, Any], Any]) -> None:
        self.fn = fn

    def execute(self, tup: TridentTuple, collector: Any) -> None:
        self.fn(tup, collector)


class _CallableFilter(Filter):
    def __init__(self, fn: Callable[[TridentTuple], bool]) -> None:
        self.fn = fn

    def is_keep(self, tup: TridentTuple) -> bool:
        return bool(self.fn(tup))


def as_function(obj: Any) -> Function:
    return obj if isinstance(obj, Function) else _CallableFunction(obj)


def as_filter(obj: Any) -> Filter:
    return obj if isinstance(obj, Filter) else _CallableFilter(obj)


def is_filter(obj: Any) -> bool:
    return isinstance(obj, Filter)


def is_aggregator(obj: Any) -> bool:
    return isinstance(obj, (CombinerAggregator, ReducerAggregator, Aggregator))


class BatchAggregator:
    """One shape for the three aggregator kinds, as the partition-aggregate processor runs them."""

    def __init__(self, agg: Any) -> None:
        self.agg = agg

    def prepare(self, conf: Mapping[str, Any], context: Any) -> None:
        self.agg.prepare(conf, context)

    def cleanup(self) -> None:
        self.agg.cleanup()


class _CombinerBatch(BatchAggregator):
    def init(self, batch_id: Any, collector: Any) -> list[Any]:
        return [self.agg.zero()]

    def aggregate(self, state: list[Any], tup: TridentTuple, collector: Any) -> None:
        state[0] = self.agg.combine(state[0], self.agg.init(tup))

    def complete(self, state: list[Any], collector: Any) -> None:
        collector.emit([state[0]])


class _ReducerBatch(BatchAggregator):
    def init(self, batch_id: Any, collector: Any) -> list[Any]:
        return [self.agg.init()]

    def aggregate(self, state: list[Any], tup: TridentTuple, collector: Any) -> None:
        state[0] = self.agg.reduce(state[0], tup)

    def complete(self, state: list[Any], collector: Any) -> None:
        collector.emit([state[0]])


class _GeneralBatch(BatchAggregator):
    def init(self, batch_id: Any, collector: Any) -> Any:
        return self.agg.init(batch_id, collector)

    def aggregate(self, state: Any, tup: TridentTuple, collector: Any) -> None:
        self.agg.aggregate(state, tup, collector)

    def complete(self, state: Any, collector: Any) -> None:
        self.agg.complete(state, collector)


class CombinerPartialCombine(CombinerAggregator):
    """Second stage of a combiner aggregation: combines partial values (the first input field)."""

    def __init__(self, agg: CombinerAggregator) -> None:
        self.agg = agg

    def prepare(self, conf: Mapping[str, Any], context: Any) -> None:
        self.agg.prepare(conf, context)

    def init(self, tup: TridentTuple) -> Any:
        return tup[0]

    def combine(self, val1: Any, val2: Any) -> Any:
        return self.agg.combine(val1, val2)

    def zero(self) -> Any:
        return self.agg.zero()


def batch_aggregator(agg: Any) -> BatchAggregator:
    if isinstance(agg, CombinerAggregator):
        return _CombinerBatch(agg)
    if isinstance(agg, ReducerAggregator):
        return _ReducerBatch(agg)
    if isinstance(agg, Aggregator):
        return _GeneralBatch(agg)
    raise TypeError(f"{agg!r} is not a CombinerAggregator, ReducerAggregator or Aggregator")
