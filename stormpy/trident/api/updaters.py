"""State updaters behind ``persistent_aggregate`` (Storm's MapCombinerAggStateUpdater and
MapReducerAggStateUpdater). They run inside a committer task between ``begin_commit(txid)``
and ``commit(txid)``, on its executor thread, against any MapState of the C/D contract:
``multi_update(keys, updaters)`` applies ``updater(old_or_None) -> new`` per key and returns the
new values (a transactional map keeps a value already written by this txid).
"""
from __future__ import annotations

import logging
from typing import Any

from stormpy.trident.runtime.operations import TridentTuple

log = logging.getLogger(__name__)


class _AggUpdater:
    """Forwards the task lifecycle to the user's aggregator."""

    agg: Any

    def prepare(self, conf: Any, context: Any) -> None:
        self.agg.prepare(conf, context)

    def cleanup(self) -> None:
        self.agg.cleanup()


class MapCombinerUpdater(_AggUpdater):
    """Tuples are ``group values + (partial,)``: one combine per key against the stored value."""

    def __init__(self, agg: Any, num_keys: int) -> None:
        self.agg = agg
        self.num_keys = num_keys

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: Any) -> None:
        n = self.num_keys
        combine = self.agg.combine
        partials: dict[tuple, Any] = {}
        for tup in tuples:
            values = tup.values
            key = tuple(values[:n])
            if key in partials:
                partials[key] = combine(partials[key], values[n])
            else:
                partials[key] = values[n]
        if not partials:
            return
        keys = list(partials)
        updaters = [_combine_with(combine, partials[k]) for k in keys]
        for key, value in zip(keys, state.multi_update(keys, updaters)):
            collector.emit([*key, value])


def _combine_with(combine: Any, partial: Any) -> Any:
    return lambda old: partial if old is None else combine(old, partial)


class MapReducerUpdater(_AggUpdater):
    """Tuples are ``group values + inputs``: ``reduce`` folds each key's tuples into the stored value."""

    def __init__(self, agg: Any, num_keys: int) -> None:
        self.agg = agg
        self.num_keys = num_keys

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: Any) -> None:
        n = self.num_keys
        grouped: dict[tuple, list[TridentTuple]] = {}
        for tup in tuples:
            values = tup.values
            rest = values[n:]
            index = {name: i for i, name in enumerate(tup.fields[n:])}
            grouped.setdefault(tuple(values[:n]), []).append(TridentTuple(rest, index))
        if not grouped:
            return
        keys = list(grouped)
        updaters = [self._reduce_all(grouped[k]) for k in keys]
        for key, value in zip(keys, state.multi_update(keys, updaters)):
            collector.emit([*key, value])

    def _reduce_all(self, tups: list[TridentTuple]) -> Any:
        agg = self.agg

        def update(old: Any) -> Any:
            curr = agg.init() if old is None else old
            for tup in tups:
                curr = agg.reduce(curr, tup)
            return curr

        return update
