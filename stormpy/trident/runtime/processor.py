"""The base of Trident's processors (one per node of a fused group) and the collector user
operations emit through. See :mod:`stormpy.trident.runtime.processors` for the group runtime.

Per tuple, a hop from one processor to the next is one call: ``GroupRuntime`` binds each node's
output (``out``) straight to its child's ``accept``, and every processor decides once (in
``bind``) how it reads its inputs.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from stormpy.trident.runtime.operations import TridentTuple

log = logging.getLogger(__name__)


class _Collector:
    """What user operations emit through; ``prefix`` is prepended (input values or group key)."""

    __slots__ = ("out", "batch", "prefix")

    def __init__(self, out: Callable[[Any, list], None]) -> None:
        self.out = out
        self.batch: Any = None
        self.prefix: list[Any] = []

    def emit(self, values: Any) -> None:
        self.out(self.batch, [*self.prefix, *values])

    def report_error(self, text: Any) -> None:
        log.error("trident operation reported: %s", text)


def _index(fields: tuple[str, ...]) -> dict[str, int]:
    return {name: i for i, name in enumerate(fields)}


def _projector(select: list[int], parent_width: int, index: Mapping[str, int]) -> Callable[[list], TridentTuple]:
    """``values -> TridentTuple`` of the selected positions, built once per processor: the whole
    input shares its (never mutated) list, one field skips the comprehension."""
    if select == list(range(parent_width)):
        return lambda values: TridentTuple(values, index)
    if len(select) == 1:
        (i,) = select
        return lambda values: TridentTuple([values[i]], index)
    return lambda values: TridentTuple([values[i] for i in select], index)


class Processor:
    """One node of a group. Tuples come in through ``accept(batch, values)`` (the router binds it
    directly, so a hop inside a group is one call) or ``execute(batch, parent, values)`` when the
    node has several parents; results go to ``out(batch, values)``, set by :meth:`wire`."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.out: Callable[[Any, list], None] = _unwired
        fields = node.parent_fields[0] if node.parent_fields else ()
        self.in_index = _index(fields)
        inputs = node.spec.get("input_fields", ())
        self.select = [self.in_index[f] for f in inputs] if inputs else []
        self.sel_index = _index(tuple(inputs))
        #: the operation reads every input field in order: its TridentTuple shares the input list
        self.whole_input = self.select == list(range(len(fields)))
        self.project = _projector(self.select, len(fields), self.sel_index)
        self.batches: dict[int, Any] = {}

    def wire(self, out: Callable[[Any, list], None]) -> None:
        self.out = out

    def bind(self) -> None:
        """Build the per-tuple fast path (``accept``) from the user objects (again after prepare)."""

    def prepare(self, conf: Mapping[str, Any], context: Any, index: int, count: int) -> None:
        """Prepare user objects; called once per task."""

    def accept(self, batch: Any, values: list) -> None:
        raise NotImplementedError

    def execute(self, batch: Any, parent: int, values: list) -> None:
        self.accept(batch, values)

    def finish(self, batch: Any) -> None:
        """The batch is complete: emit what was held (aggregates, queries, joins, states)."""

    def complete(self, batch: Any) -> None:
        """A commit-phase processor's batch is complete; its ``finish`` waits for ``$commit``."""

    def discard(self, txid: int) -> None:
        self.batches.pop(txid, None)

    def cleanup(self) -> None:
        """The task stops."""


def _unwired(batch: Any, values: list) -> None:
    raise RuntimeError("trident processor used before GroupRuntime wired it")
