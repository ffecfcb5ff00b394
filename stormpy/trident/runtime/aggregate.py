"""The partition aggregation processor (``aggregate``, ``partition_aggregate``, the pre-combine
of ``persistent_aggregate``): per tuple, the hottest code of a grouped count."""
from __future__ import annotations

import logging
import operator
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from stormpy.trident.runtime import operations as ops
from stormpy.trident.runtime.processor import Processor, _Collector

log = logging.getLogger(__name__)

_MISSING = object()


class AggregateProcessor(Processor):
    """partition (optionally grouped) aggregation of one batch; emits at finish.

    Per tuple this is the hottest code of a grouped count, so the work is decided once here:
    the group key is read with one ``itemgetter`` (a single group field is kept bare and made a
    tuple only at finish), a combiner or reducer keeps its bare value per key (no collector, as
    neither may emit before ``complete``), and stormpy's own ``Count`` and ``Sum`` (exact
    types: a subclass may override them) skip the TridentTuple and the calls altogether.
    """

    def __init__(self, node: Any) -> None:
        super().__init__(node)
        agg = node.spec["agg"]
        self.agg = ops.batch_aggregator(agg)
        self.group = [self.in_index[f] for f in node.spec.get("group_fields", ())]
        self.key_of = _key_getter(self.group)
        self.collector = _Collector(self.out)
        self.kind = ("combiner" if isinstance(agg, ops.CombinerAggregator)
                     else "reducer" if isinstance(agg, ops.ReducerAggregator) else "general")
        self._cur_txid: int | None = None
        self._cur_states: dict[Any, Any] = {}
        self._inline: list[_InlineCount] = []   # collectors handed out (their batch is reset with ours)
        user = self.agg.agg
        #: stormpy's own Count or Sum: the value per key is a plain int-zero-based sum
        self.adds = self.kind == "combiner" and (type(user) is ops.Count or
                                                 _summed_field(user, self.select) is not None)

    def wire(self, out: Callable[[Any, list], None]) -> None:
        self.out = self.collector.out = out

    def prepare(self, conf: Mapping[str, Any], context: Any, index: int, count: int) -> None:
        self.agg.prepare(conf, context)

    def bind(self) -> None:
        self.accept = self._accepter()  # type: ignore[method-assign,assignment]

    def _states(self, txid: int) -> dict[Any, Any]:
        states = self.batches.get(txid)
        if states is None:
            # A plain count or sum adds to int zero: ``states[key] += n`` without a get per tuple.
            states = self.batches[txid] = defaultdict(int) if self.adds else {}
        self._cur_txid, self._cur_states = txid, states
        return states

    def _accepter(self) -> Callable[[Any, list], None]:
        if self.kind == "general":
            return self._accept_general
        key_of, project = self.key_of, self.project
        user = self.agg.agg
        summed = _summed_field(user, self.select)
        if self.kind == "combiner" and type(user) is ops.Count:
            def count(batch: Any, values: list) -> None:
                txid = batch.txid
                states = self._cur_states if txid == self._cur_txid else self._states(txid)
                states[key_of(values)] += 1
            return count
        if self.kind == "combiner" and summed is not None:
            def add(batch: Any, values: list) -> None:
                txid = batch.txid
                states = self._cur_states if txid == self._cur_txid else self._states(txid)
                states[key_of(values)] += values[summed]
            return add
        if self.kind == "combiner":
            init, combine, zero = user.init, user.combine, user.zero

            def combiner(batch: Any, values: list) -> None:
                txid = batch.txid
                states = self._cur_states if txid == self._cur_txid else self._states(txid)
                key = key_of(values)
                old = states.get(key, _MISSING)
                states[key] = combine(zero() if old is _MISSING else old, init(project(values)))
            return combiner
        first, reduce = user.init, user.reduce

        def reducer(batch: Any, values: list) -> None:
            txid = batch.txid
            states = self._cur_states if txid == self._cur_txid else self._states(txid)
            key = key_of(values)
            old = states.get(key, _MISSING)
            states[key] = reduce(first() if old is _MISSING else old, project(values))
        return reducer

    def _accept_general(self, batch: Any, values: list) -> None:
        txid = batch.txid
        states = self._cur_states if txid == self._cur_txid else self._states(txid)
        key = self.key_of(values)
        collector = self.collector
        collector.batch, collector.prefix = batch, self._prefix(key)
        entry = states.get(key, _MISSING)
        if entry is _MISSING:
            entry = states[key] = self.agg.init(batch.txid, collector)
        self.agg.aggregate(entry, self.project(values), collector)

    def accept(self, batch: Any, values: list) -> None:
        self._accepter()(batch, values)   # unbound (a processor driven without GroupRuntime)

    def inline_collector(self, width: int) -> Any:
        """For a Function whose only child this is: a collector that counts (or sums) what the
        function emits right away, when the group key (one field) and the summed field are
        among the function's outputs (positions >= ``width``, the function's input width).
        None when that does not apply (the function's tuples then come through ``accept``)."""
        if self.kind != "combiner" or len(self.group) != 1 or self.group[0] < width:
            return None
        user = self.agg.agg
        inline: _InlineCount | None = None
        if type(user) is ops.Count:
            inline = _InlineCount(self, self.group[0] - width)
        summed = _summed_field(user, self.select)
        if summed is not None and summed >= width:
            inline = _InlineSum(self, self.group[0] - width, summed - width)
        if inline is not None:
            self._inline.append(inline)
        return inline

    def _forget_current(self) -> None:
        self._cur_txid, self._cur_states = None, {}
        for inline in self._inline:
            inline.batch = None

    def _prefix(self, key: Any) -> list[Any]:
        return [key] if len(self.group) == 1 else list(key)

    def _zero(self, batch: Any) -> Any:
        """The value of a key that saw no tuple (an ungrouped aggregate of an empty batch)."""
        if self.kind == "combiner":
            return self.agg.agg.zero()
        if self.kind == "reducer":
            return self.agg.agg.init()
        collector = self.collector
        collector.batch, collector.prefix = batch, []
        return self.agg.init(batch.txid, collector)

    def finish(self, batch: Any) -> None:
        states = self.batches.pop(batch.txid, {})
        self._forget_current()
        if not self.group and () not in states:
            states[()] = self._zero(batch)  # an ungrouped aggregate emits for every batch (zero when empty)
        collector = self.collector
        collector.batch = batch
        general = self.kind == "general"
        for key, state in states.items():
            collector.prefix = self._prefix(key)
            if general:
                self.agg.complete(state, collector)
            else:
                collector.emit([state])

    def discard(self, txid: int) -> None:
        self.batches.pop(txid, None)
        self._forget_current()

    def cleanup(self) -> None:
        self.agg.cleanup()


class _InlineCount:
    """A Function's collector feeding a one-field grouped ``Count``: ``begin(batch)`` when the
    input tuple's batch is not ``batch`` (the aggregate resets that whenever it lets go of a
    batch's counts), then each ``emit(values)`` adds one to ``values[key]``'s count."""

    __slots__ = ("proc", "key", "states", "batch")

    def __init__(self, proc: AggregateProcessor, key: int) -> None:
        self.proc = proc
        self.key = key
        self.states: dict[Any, Any] = {}
        self.batch: Any = None

    def begin(self, batch: Any) -> None:
        proc, txid = self.proc, batch.txid
        self.states = proc._cur_states if txid == proc._cur_txid else proc._states(txid)
        self.batch = batch

    def emit(self, values: Any) -> None:
        self.states[values[self.key]] += 1

    def report_error(self, text: Any) -> None:
        log.error("trident operation reported: %s", text)


class _InlineSum(_InlineCount):
    """Like :class:`_InlineCount`, adding ``values[summed]`` (stormpy's ``Sum``)."""

    __slots__ = ("summed",)

    def __init__(self, proc: AggregateProcessor, key: int, summed: int) -> None:
        super().__init__(proc, key)
        self.summed = summed

    def emit(self, values: Any) -> None:
        self.states[values[self.key]] += values[self.summed]


def _key_getter(group: list[int]) -> Callable[[list], Any]:
    """The group key of a tuple: the bare value for one field, a tuple for several, () for none."""
    if not group:
        return lambda values: ()
    return operator.itemgetter(*group)


def _summed_field(agg: Any, select: list[int]) -> int | None:
    """The input position a plain sum adds up: stormpy's ``Sum``, or the second stage of a
    ``Count`` / ``Sum`` combined across partitions (``CombinerPartialCombine``); else None."""
    if not select:
        return None
    if type(agg) is ops.Sum:
        return select[0]
    if type(agg) is ops.CombinerPartialCombine and type(agg.agg) in (ops.Count, ops.Sum):
        return select[0]
    return None
