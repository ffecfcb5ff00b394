"""The one emit path: an executor's Outbox, the checks, and each task's ``emit``.

Every emit, of every component, is the same four steps (DESIGN sections 2 and 6):

1. check the stream, the arity and that every value will serialize;
2. choose the target tasks (the stream's grouping, or ``direct_task``);
3. anchor: make one message ``(stream, src_task, values, anchors)`` per target, where the
   anchoring strategy decides ``anchors`` — a spout *starts* a tuple tree, a bolt *extends*
   the trees of the tuples it is anchored to (``stormpy.task.tree`` owns that arithmetic);
4. append each message to the Outbox, which hands a destination's batch to the transfer
   when it is full; count the emit.

``make_emit(task, place, fast, starts_trees)`` builds a task's ``emit`` from its strategy's
``place`` function (``tree.spout_place`` or ``tree.bolt_place``): a general path for every
case, and a short path for the common one (default stream, a list of plain scalars), built by
``tree.fast_spout_emit``/``tree.fast_bolt_emit`` from a :class:`FastRoute` — it runs once per
emitted tuple. Everything here runs on the executor thread that owns the Outbox, except that
the fast emits of one component's tasks in a worker share their rows (``WorkerRuntime.emit_rows``).
"""
from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stormpy.serialization import SCALARS, SerializationError
from stormpy.streams import DEFAULT_STREAM
from stormpy.task.tree import EmitFn, Place, Ticks
from stormpy.api.tuple import Tuple, values_class

try:
    import cython   # compiled, a constant of the compiler: the interpreted branch is not built
except ImportError:   # Cython is only needed to build: interpreted without it, the same answer
    from stormpy.task import not_compiled as cython   # type: ignore[no-redef]  # the same names
if cython.compiled:   # lists with room: see capi.pxd
    from cython.cimports.stormpy.task.capi import list_put, list_with_room
else:
    from stormpy.task.capi import list_put, list_with_room

if TYPE_CHECKING:
    from stormpy.task.executor import TaskBase
    from stormpy.task.grouping import Route

log = logging.getLogger(__name__)

#: ``(stream, src_task, values, anchors)``; anchors is None or ``(root id, edge id, ...)``
#: (``tree.Anchors``).
Message = tuple[str, int, Any, tuple[int, ...] | None]


class EmitError(ValueError):
    """An emit the topology does not allow (undeclared stream, wrong arity, bad direct task)."""


class Outbox:
    """Per-destination batches of messages of one executor (its thread only).

    A destination's batch goes to ``send(dest, messages)`` (the transfer) as soon as it holds
    ``batch_size`` messages; :meth:`flush` sends the partly filled ones. ``boxes`` is public so
    that the emit short paths can append with local variables; it is cleared in place, never
    replaced, so such references stay valid.
    """

    __slots__ = ("boxes", "batch_size", "_send", "_name", "folds", "sizes")

    def __init__(self, send: Callable[[int, list[Message]], None], batch_size: int, name: str) -> None:
        #: destination task -> its batch; a plain dict (typed as one in the compiled fast emit:
        #: a C lookup), a missing batch made by whoever appends first
        self.boxes: dict[int, list[Message]] = {}
        self.batch_size = batch_size
        self._send = send
        self._name = name
        #: run before each batch is handed over: the fast emit paths' counts join the stats
        #: (``count_ticks``), so counts lag the transfer by less than a batch
        self.folds: list[Callable[[], None]] = []
        #: destination task -> the length of its last batch handed over (``new_box``)
        self.sizes: dict[int, int] = {}

    def __bool__(self) -> bool:
        return bool(self.boxes)

    def __len__(self) -> int:
        """Messages waiting (approximate when called from another thread)."""
        return sum(len(v) for v in list(self.boxes.values()))

    def new_box(self, dest: int) -> list[Message]:
        """A new, empty batch for ``dest``. Compiled, it has room for as many messages as the
        last batch for ``dest`` had, a quarter more and 8, and at most ``batch_size`` (a batch is
        sent when it holds that many); filled by ``list_put``, it is not copied to larger blocks
        as it grows (``capi.pxd``)."""
        last = self.sizes.get(dest, 0)
        box: list[Message] = list_with_room(min(last + (last >> 2) + 8, self.batch_size))
        self.boxes[dest] = box
        return box

    def add(self, dest: int, message: Message) -> None:
        box = self.boxes.get(dest)
        if box is None:
            box = self.new_box(dest)
        list_put(box, message)
        if len(box) >= self.batch_size:
            self.send_full(dest)

    def add_to_each(self, targets: Sequence[int], message: Message) -> None:
        """The same (unanchored) message to every target."""
        boxes = self.boxes
        batch_size = self.batch_size
        for dest in targets:
            box = boxes.get(dest)
            if box is None:
                box = self.new_box(dest)
            list_put(box, message)
            if len(box) >= batch_size:
                self.send_full(dest)

    def send_full(self, dest: int) -> None:
        """Hand one destination's batch to the transfer now."""
        for fold in self.folds:
            fold()
        messages = self.boxes.pop(dest)
        self.sizes[dest] = len(messages)
        try:
            self._send(dest, messages)
        except Exception:
            log.exception("executor %s: transfer to task %d failed; %d messages lost",
                          self._name, dest, len(messages))

    def flush(self) -> None:
        """Hand every partly filled batch to the transfer."""
        boxes = self.boxes
        for dest in list(boxes):
            self.send_full(dest)


# ---------------------------------------------------------------- checks and targets

def check_emit(task: TaskBase, route: Route | None, stream: str, values: Any) -> None:
    """Arity and serializability of emitted values (raises EmitError/SerializationError)."""
    if route is None:
        raise EmitError(f"component {task.component_id!r} emitted on undeclared stream {stream!r}")
    if not isinstance(values, (list, tuple)):
        raise SerializationError(f"tuple values must be a list or tuple, got {type(values).__name__}")
    if len(values) != route.num_fields:
        raise EmitError(f"component {task.component_id!r} emitted {len(values)} values on stream "
                        f"{stream!r}, which declares {route.num_fields} fields")
    check = task.executor.serialization.check_value
    for value in values:
        if type(value) not in SCALARS or type(value) is int:
            check(value)


def direct_targets(task: TaskBase, route: Route, stream: str, direct_task: int | None) -> list[int]:
    if direct_task is None:
        raise EmitError(f"stream {stream!r} of {task.component_id!r} is direct: emit needs direct_task")
    if not route.direct:
        raise EmitError(f"direct_task given for stream {stream!r} of {task.component_id!r}, "
                        f"which is not declared direct")
    return [direct_task] if direct_task in route.direct_tasks else []


# ---------------------------------------------------------------- emit

@dataclass(frozen=True)
class FastRoute:
    """What the fast emit paths (``stormpy.task.tree``) need of the default stream's route."""

    select: Callable[[Sequence[Any]], list[int]]
    num_fields: int
    counter: list[int]                          # the stream's [emitted, transferred]
    check_value: Callable[[Any], None]
    key_cache: dict[str, list[int]] | None      # fields grouping on one field: key -> targets
    key_index: int
    #: ``ticks.append(None)`` counts a one-target emit (no int object per emit); the executor
    #: adds the count to ``counter`` when it flushes (``count_ticks``; compiled, a ``tree.Ticks``)
    ticks: list[None]
    #: a stream of one field, fields-grouped on it: str value -> (targets, values tuple of
    #: ``values_cls``), see ``tree.new_row``; else None
    rows: dict[str, tuple[list[int], Any]] | None = None
    values_cls: type | None = None


def count_ticks(counter: list[int]) -> tuple[list[None], Callable[[], None]]:
    """``(ticks, fold)``: ``ticks.append(None)`` counts one emit with one transfer; ``fold()``
    adds the emits counted since the last fold to the stream's ``[emitted, transferred]``.

    A list's ``append``: one pointer stored, no object made (17 ns against 27 ns for an
    ``itertools.count`` step, which makes and frees an int past 256, and twice that for
    ``counter[0] += 1; counter[1] += 1``). Called on the list, not through a bound ``append``:
    the interpreter has an instruction for ``list.append`` (2-3 ns less a call). The list holds
    one ``None`` per emit until the next fold, which runs before every batch the outbox hands
    over and at every flush. Compiled, it is a :class:`~stormpy.task.tree.Ticks`: the same calls
    on a C count (the list grew from empty after every fold, see ``capi.pxd``).
    """
    ticks: list[None] = Ticks() if cython.compiled else []   # type: ignore[assignment]  # Ticks: a list's interface

    def fold() -> None:
        new = len(ticks)
        if new:
            ticks.clear()
            counter[0] += new
            counter[1] += new

    return ticks, fold


def debug_emit(task: TaskBase, emit: EmitFn) -> EmitFn:
    """``topology.debug``: log every emitted tuple (always the general, slower path)."""

    def logged(values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
               direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        targets = emit(values, tup_id, stream, anchors, direct_task, True)
        log.info("emitted: component %s task %d stream %s values %r to tasks %s",
                 task.component_id, task.task_id, stream or DEFAULT_STREAM, values, targets)
        return targets if need_task_ids else None

    return logged


def general_emit(task: TaskBase, place: Place, starts_trees: bool) -> EmitFn:
    """The emit for every case: checks, targets (grouping or direct), then ``place``.

    ``starts_trees``: spouts (``tup_id`` names the tree; ``anchors`` are ignored). For bolts a
    string ``tup_id`` is pystorm's positional stream (bolts have no tuple ids of their own), and
    ``anchors`` may hold Tuples, raw messages, or tuple ids of held tuples.
    """
    routes = task.routes
    stream_counter = task.executor.stats.stream_counter
    check_value = task.executor.serialization.check_value

    def general(values: Sequence[Any], tup_id: Any = None, stream: str | None = None, anchors: Any = None,
                direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        if not starts_trees:
            if stream is None and isinstance(tup_id, str):
                stream = tup_id
            tup_id = None
            if anchors is not None:
                if isinstance(anchors, Tuple):   # one Tuple (iterable as pystorm's namedtuple)
                    anchors = [anchors]
                anchors = [a if isinstance(a, Tuple) or type(a) is tuple else task.resolve(a)  # type: ignore[attr-defined]
                           for a in anchors]
        if stream is None:
            stream = DEFAULT_STREAM
        route = routes.get(stream)
        if route is None or type(values) is not list or len(values) != route.num_fields:
            check_emit(task, route, stream, values)
            values = list(values)
        else:
            for value in values:
                if type(value) not in SCALARS or type(value) is int:
                    check_value(value)
        assert route is not None and isinstance(values, list)   # check_emit raised otherwise
        if direct_task is not None or route.direct:
            targets = direct_targets(task, route, stream, direct_task)
        else:
            targets = route.select(values)
        place(stream, values, targets, tup_id, anchors)
        counter = stream_counter(stream)
        counter[0] += 1
        counter[1] += len(targets)
        return list(targets) if need_task_ids else None

    return general


def make_emit(task: TaskBase, place: Place, fast: Callable[[Any, FastRoute, Place, EmitFn], EmitFn] | None,
              starts_trees: bool) -> EmitFn:
    """The task's ``emit(values, tup_id=None, stream=None, anchors=None, direct_task=None,
    need_task_ids=False)`` over the anchoring strategy ``place``.

    ``fast`` (``tree.fast_spout_emit``/``tree.fast_bolt_emit``) builds the short path for the
    common case, a default stream that is not direct; everything else takes the general path.
    """
    general = general_emit(task, place, starts_trees)
    ex = task.executor
    if ex.settings.debug:
        return debug_emit(task, general)
    route = task.routes.get(DEFAULT_STREAM)
    if route is None or route.direct or fast is None:
        return general
    select = route.select
    counter = ex.stats.stream_counter(DEFAULT_STREAM)
    ticks, fold = count_ticks(counter)
    ex.stat_folds.append(fold)
    key_cache = getattr(select, "key_cache", None)
    rows, values_cls = None, None
    if key_cache is not None and route.num_fields == 1:   # fields grouping on the only field: tree.new_row
        rows = ex.runtime.emit_rows.setdefault((task.component_id, DEFAULT_STREAM), {})
        fields = ex.plan.components[task.component_id].streams[DEFAULT_STREAM].fields
        values_cls = values_class(task.component_id, DEFAULT_STREAM, fields)
    fast_route = FastRoute(select=select, num_fields=route.num_fields, counter=counter,
                           check_value=ex.serialization.check_value,
                           key_cache=key_cache, key_index=getattr(select, "key_index", 0), ticks=ticks,
                           rows=rows, values_cls=values_cls)
    return fast(task, fast_route, place, general)
