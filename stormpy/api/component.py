"""The user API: ``Spout``, ``Bolt``, ``BatchingBolt``, ``TicklessBatchingBolt``.

Compatible with streamparse/pystorm (DESIGN section 2): users subclass these, declare
``outputs`` and override ``initialize``, ``next_tuple``/``process``, ``ack``/``fail`` and so on.
Everything a component calls back into (``emit``, bolt ``ack``/``fail``, ``report_error``)
goes to the task object its executor attaches with ``_attach`` before ``initialize``, through
the component contract (``stormpy.api.contract``: ``SpoutOutputCollector`` and
``BoltOutputCollector``), the only engine calls a component (framework bolts included) makes;
all of a component's methods run on that executor's thread, so components need no locks.

Timing is the executor's job: a component that sets ``timer_interval_secs`` gets
``on_timer()`` calls from its executor thread at that interval (the batching bolts use it;
no extra threads). How a bolt's input reaches it is its *driver*'s job
(``Bolt.make_driver``, see ``stormpy.task.drivers``): per tuple, batching, or raw batches.

A component may be declared by class (``SplitBolt.spec(...)``: each task calls ``SplitBolt()``)
or by instance (``SplitBolt(sep=",").spec(...)``: the instance travels pickled with
cloudpickle, lambdas inside included, and each task unpickles its own copy).
"""
from __future__ import annotations

import ast
import inspect
import logging
import os
import textwrap
import traceback
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, cast

from stormpy import config as cfg
from stormpy.api.contract import BoltDriver, BoltOutputCollector, ComponentEngine, SpoutOutputCollector
from stormpy.api.tuple import Tuple

log = logging.getLogger(__name__)
#: ``timer_interval_secs`` when the user assigned none (``None`` is a value they may assign).
_UNSET: Any = object()

#: How the engine feeds the API's own bolts: ``"tuple"`` (``Bolt``: one ``process`` call per
#: tuple) and ``"batching"`` (``BatchingBolt``), each called as ``driver(task, bolt)``. The
#: engine registers its driver classes here when ``stormpy.task.drivers`` is imported: the
#: engine imports the user API, never the reverse.
DRIVERS: dict[str, Callable[[Any, Any], BoltDriver]] = {}


class Metrics(dict[str, float]):
    """Free-form numeric counters of one task; they appear in its executor's stats."""

    def set(self, name: str, value: float) -> None:
        self[name] = value

    def incr(self, name: str, n: float = 1) -> None:
        self[name] = self.get(name, 0) + n


class _Detached:
    """Stands in for the task until an executor attaches one: calling out is a clear error."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("this component is not running in a stormpy executor yet "
                           "(emit/ack/fail work from initialize() on)")


class _SpecMethod:
    """``spec`` that works on the class (streamparse) and on an instance (which then travels).

    ``SplitBolt.spec(...)`` declares the class: every task makes ``SplitBolt()``.
    ``SplitBolt(sep=",").spec(...)`` declares that instance: it is pickled at compile time
    (``PythonObject.serialized``) and every task starts from its own unpickled copy.
    """

    def __get__(self, obj: Any, cls: type) -> Callable[..., Any]:
        def spec(name: str | None = None, inputs: Any = None, par: Any = None,
                 config: Mapping[str, Any] | None = None) -> Any:
            """Declare this component in a Topology class (streamparse's ``Component.spec``);
            ``par``/``config`` default to the class attributes of the same names."""
            from stormpy.api.dsl import ComponentSpec

            return ComponentSpec(cls, name=name, inputs=inputs, par=par, config=config, instance=obj)

        return spec


class Component:
    """Base of spouts and bolts: outputs, lifecycle hooks, logging and error reporting."""

    outputs: Any = None
    #: streamparse's spec defaults: tasks (an int, or ``{"env": n}``) and the component config.
    par: Any = 1
    config: Mapping[str, Any] | None = None
    #: If set, the executor calls ``on_timer()`` this often (seconds) from its thread.
    timer_interval_secs: float | None = None

    # The framework's own handles live under ``_stormpy_*``/``_task`` names: every public
    # attribute a user may plausibly assign (``state``, ``context``, ``conf``, ``stormconf``,
    # ``storm_conf``, ``collector``, ``window``, ``outputs``, ``name``, ``logger``, ``log``) is
    # theirs to overwrite; the engine never reads the public copies it hands out.
    _task: ComponentEngine = cast(ComponentEngine, _Detached())
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = log
    metrics: Metrics

    spec = _SpecMethod()

    # ------------------------------------------------------------ wiring (executor thread)
    @property
    def _stormpy_collector(self) -> ComponentEngine:
        """The engine side of this task, as the component contract describes it (framework
        components, e.g. Trident's bolts and the Spark sink, call the engine through it)."""
        return self._task

    def _attach(self, task: ComponentEngine, component_id: str, task_id: int) -> None:
        """Called by the executor before ``initialize``: connect this instance to its task."""
        self._task = task
        self.metrics = Metrics()
        self._stormpy_logger = logging.LoggerAdapter(logging.getLogger(f"stormpy.component.{component_id}"),
                                                     {"task_id": task_id})
        # Not ``vars(self)``: on Python 3.11 that turns the instance's attributes into a dict
        # the interpreter's attribute cache cannot serve, and every ``self.x`` in the user's
        # ``process`` then takes the slow lookup (about 270 machine instructions each).
        if self.logger is Component.logger:
            self.logger = self._stormpy_logger   # a logger the user set in __init__ or the class stays
        # Fast path: the task's emit is bound straight onto the instance unless the user
        # overrode emit (then their override calls Component.emit, which delegates).
        if type(self).emit is Component.emit:
            self.emit = task.emit  # type: ignore[method-assign]

    def _set_context(self, stormconf: Mapping[str, Any], context: Any) -> None:
        """pystorm's handshake attributes, set by the executor right before ``initialize``.

        The public ones are copies for user code (which may overwrite them); the framework
        keeps its own in ``_stormpy_conf``/``_stormpy_context``."""
        self._stormpy_conf = stormconf
        self._stormpy_context = context
        self.storm_conf = stormconf
        self.context = context
        self.topology_name = stormconf.get(cfg.TOPOLOGY_NAME.name, "")
        self.task_id = context.task_id
        self.component_name = context.component_id
        self.debug = bool(stormconf.get(cfg.TOPOLOGY_DEBUG.name, False))
        self.pid = os.getpid()

    # ------------------------------------------------------------ user hooks
    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        """Called once per task instance, before any tuple; ``stormconf`` is the topology conf."""

    def close(self) -> None:
        """Called once when the task stops (also before a crashed task is re-created)."""

    def on_timer(self) -> None:
        """Called every ``timer_interval_secs`` from the executor thread."""

    # ------------------------------------------------------------ calls into the engine
    def emit(self, values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        """Emit a tuple; returns the receiving task ids when ``need_task_ids`` is true."""
        return self._task.emit(values, tup_id=tup_id, stream=stream, anchors=anchors,
                               direct_task=direct_task, need_task_ids=need_task_ids)

    def report_error(self, message: Any) -> None:
        """Report an error for this component (kept as its last errors; shown by the UI)."""
        self._task.report_error(str(message))

    def report_metric(self, name: str, value: float) -> None:
        """pystorm's ``report_metric``: the value shows in this task's stats as ``metrics[name]``."""
        self.metrics.set(name, value)

    def raise_exception(self, exception: BaseException, tup: Tuple | None = None) -> None:
        """pystorm's way to give up: report the error and raise it, so the task restarts."""
        text = "".join(traceback.format_exception(exception))
        if tup is not None:
            text = f"{text}while processing {tup!r}"
        self._task.report_error(text)
        self._task.mark_reported(exception)
        raise exception

    def log(self, message: Any, level: str | int | None = None) -> None:
        """pystorm's ``self.log(msg, level)``: goes to ``self.logger`` (the framework never calls
        it, so a user may assign ``self.log`` a logger of their own)."""
        if isinstance(level, str):
            level = logging.getLevelName(level.upper())
        if not isinstance(level, int):
            level = logging.INFO
        logger = self.logger if hasattr(self.logger, "log") else self._fw_logger()
        logger.log(level, "%s", message)

    def _fw_logger(self) -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
        """The framework's logger of this task (the module logger before the task started)."""
        return getattr(self, "_stormpy_logger", log)


class Spout(Component):
    """A source of tuples. ``next_tuple`` is called while the topology is active."""

    outputs: Any = None
    _task: SpoutOutputCollector

    @property
    def _stormpy_collector(self) -> SpoutOutputCollector:
        return self._task

    def next_tuple(self) -> None:
        """Emit zero or more tuples; with ``tup_id`` they are tracked by the acker."""

    def ack(self, tup_id: Any) -> None:
        """The tuple tree of ``tup_id`` was fully processed."""

    def fail(self, tup_id: Any) -> None:
        """The tuple tree of ``tup_id`` failed or timed out; replaying is the spout's choice."""

    def activate(self) -> None:
        """The topology became active: ``next_tuple`` calls follow."""

    def deactivate(self) -> None:
        """The topology was deactivated: no more ``next_tuple`` calls until activate."""


class ReliableSpout(Spout):
    """pystorm's ReliableSpout: every emit needs a ``tup_id``; a failed tuple is emitted again
    (same values, stream and id) up to ``max_fails`` times, then given up on as if acked."""

    max_fails = 3

    def _attach(self, task: ComponentEngine, component_id: str, task_id: int) -> None:
        super()._attach(task, component_id, task_id)
        if type(self).emit is Component.emit:   # keep the bookkeeping on the fast path too
            self.emit = self._reliable_emit  # type: ignore[method-assign]
        self.failed_tuples: Counter[Any] = Counter()
        self.unacked_tuples: dict[Any, tuple[Any, str | None, int | None, bool]] = {}

    def emit(self, values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        return self._reliable_emit(values, tup_id, stream, anchors, direct_task, need_task_ids)

    def _reliable_emit(self, values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
                       direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        if tup_id is None:
            raise ValueError("You must provide a tuple ID when emitting with a ReliableSpout in order for "
                             "the tuple to be tracked.")
        self.unacked_tuples[tup_id] = (values, stream, direct_task, need_task_ids)
        return self._task.emit(values, tup_id=tup_id, stream=stream, direct_task=direct_task,
                               need_task_ids=need_task_ids)

    def ack(self, tup_id: Any) -> None:
        self.failed_tuples.pop(tup_id, None)
        if self.unacked_tuples.pop(tup_id, None) is None:
            self._fw_logger().error("Received ack for unknown tuple ID: %r", tup_id)

    def fail(self, tup_id: Any) -> None:
        saved = self.unacked_tuples.get(tup_id)
        if saved is None:
            self._fw_logger().error("Received fail for unknown tuple ID: %r", tup_id)
            return
        values, stream, direct_task, need_task_ids = saved
        if self.failed_tuples[tup_id] < self.max_fails:
            self.failed_tuples[tup_id] += 1
            self.emit(values, tup_id=tup_id, stream=stream, direct_task=direct_task, need_task_ids=need_task_ids)
        else:
            self._fw_logger().info("Acking tuple ID %r after it exceeded retry limit (%r)", tup_id, self.max_fails)
            self.ack(tup_id)


class Bolt(Component):
    """Processes tuples. With the defaults each tuple is anchored, acked or failed for you."""

    outputs: Any = None
    auto_ack = True
    auto_anchor = True
    auto_fail = True
    _task: BoltOutputCollector

    @property
    def _stormpy_collector(self) -> BoltOutputCollector:
        return self._task

    @staticmethod
    def is_tick(tup: Tuple) -> bool:
        """pystorm's ``Bolt.is_tick(tup)``: whether ``tup`` is a tick tuple."""
        return tup.is_tick

    def make_driver(self, task: BoltOutputCollector) -> BoltDriver:
        """How the executor feeds this bolt (framework hook, see ``stormpy.task.drivers``):
        one ``process`` call per tuple, acked after it returns when ``auto_ack``."""
        return DRIVERS["tuple"](task, self)

    def process(self, tup: Tuple) -> None:
        """Handle one input tuple."""

    def process_tick(self, tup: Tuple) -> None:
        """Handle a tick tuple (``topology.tick.tuple.freq.secs``)."""

    def ack(self, tup: Tuple) -> None:
        """Mark ``tup`` fully processed by this bolt."""
        self._task.ack(tup)

    def ack_many(self, tups: Iterable[Tuple]) -> None:
        """Ack every Tuple of ``tups`` not yet acked or failed (one call for a whole batch)."""
        self._task.ack_many(tups)

    def fail(self, tup: Tuple) -> None:
        """Fail ``tup``: the spout's ``fail`` runs for its tuple tree."""
        self._task.fail(tup)

    @contextmanager
    def anchored(self, tups: Iterable[Any]) -> Iterator[None]:
        """``with self.anchored(tups):`` emits inside (without ``anchors=``) are anchored to
        every tuple of ``tups``: their trees complete only when the emitted tuples are acked."""
        with self._task.anchored(tups):
            yield

    def ack_message(self, message: Any) -> None:
        """Raw-batch drivers only: ack a raw message ``(stream, src_task, values, anchors)``."""
        self._task.ack_message(message)

    def fail_message(self, message: Any) -> None:
        """Raw-batch drivers only: fail a raw message's tuple trees."""
        self._task.fail_message(message)

    def ack_messages(self, messages: list[Any]) -> None:
        """Raw-batch drivers only: ack a whole batch of raw messages in one call."""
        self._task.ack_messages(messages)

    def count_executed(self, key: tuple[str, str], n: int) -> None:
        """Raw-batch drivers that take messages as rows: count ``n`` messages of
        ``key`` = (component, stream) as executed (the per-tuple drivers count their own)."""
        self._task.count_executed(key, n)


class BatchingBolt(Bolt):
    """streamparse's BatchingBolt: groups tuples and hands each group to ``process_batch``.

    A batch per ``group_key(tup)`` is flushed every ``secs_between_batches`` (driven by the
    executor's timer), after ``ticks_between_batches`` tick tuples when that is set, as soon
    as it holds ``batch_size`` tuples when that is set (a stormpy extension), and at shutdown.
    With ``auto_ack`` every tuple of a batch is acked after ``process_batch`` returns; when it
    raises they are all failed (``auto_fail``) and the error is reported; the task lives on.
    """

    secs_between_batches: float = 2
    ticks_between_batches: int | None = None
    batch_size: int | None = None

    @property
    def timer_interval_secs(self) -> float | None:
        """Time drives batches unless ``ticks_between_batches`` is set (pystorm: ticks only);
        a value the user assigns wins."""
        assigned = getattr(self, "_timer_interval_secs", _UNSET)   # not vars(self): see _attach
        if assigned is not _UNSET:
            return assigned
        return None if self.ticks_between_batches else self.secs_between_batches

    @timer_interval_secs.setter
    def timer_interval_secs(self, value: float | None) -> None:
        self._timer_interval_secs = value

    def _attach(self, task: ComponentEngine, component_id: str, task_id: int) -> None:
        super()._attach(task, component_id, task_id)
        self._batches: dict[Hashable, list[Tuple]] = {}
        self._ticks_seen = 0

    def group_key(self, tup: Tuple) -> Hashable:
        """The batch a tuple belongs to; one batch for everything by default."""
        return None

    def process_batch(self, key: Hashable, tups: list[Tuple]) -> None:
        """Handle one batch (all tuples sharing ``key`` since the last flush)."""

    def process(self, tup: Tuple) -> None:
        key = self.group_key(tup)
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = []
        batch.append(tup)
        if self.batch_size and len(batch) >= self.batch_size:
            self._run_batch(key)

    def process_tick(self, tup: Tuple) -> None:
        if self.ticks_between_batches:
            self._ticks_seen += 1
            if self._ticks_seen >= self.ticks_between_batches:
                self._ticks_seen = 0
                self.flush_batches()

    def make_driver(self, task: BoltOutputCollector) -> BoltDriver:
        """Tuples wait in batches and are acked after ``process_batch``, not after ``process``."""
        return DRIVERS["batching"](task, self)

    def on_timer(self) -> None:
        self.flush_batches()

    def flush_batches(self) -> None:
        """Run ``process_batch`` for every pending batch now."""
        for key in list(self._batches):
            self._run_batch(key)

    def pending_tuples(self) -> list[Tuple]:
        """Tuples waiting in batches (the executor fails them if the task crashes)."""
        return [t for batch in self._batches.values() for t in batch]

    def _run_batch(self, key: Hashable) -> None:
        tups = self._batches.pop(key, None)
        if not tups:
            return
        try:
            with self.anchored(tups) if self.auto_anchor else nullcontext():
                self.process_batch(key, tups)
        except Exception as exc:
            self._fw_logger().error("process_batch failed for key %r (%d tuples): %s", key, len(tups), exc)
            if self.auto_fail:
                for tup in tups:
                    if not tup._done:
                        self.fail(tup)
            self.report_error("".join(traceback.format_exception(exc)))
            return
        if self.auto_ack:
            for tup in tups:
                if not tup._done:
                    self.ack(tup)


class TicklessBatchingBolt(BatchingBolt):
    """streamparse's TicklessBatchingBolt: flushed by time only (the executor's timer)."""

    def process_tick(self, tup: Tuple) -> None:
        """Ticks do not drive this bolt."""


def read_only_assignments(cls: type) -> list[str]:
    """User methods of ``cls`` that assign ``self.<name>`` where ``name`` is a framework property
    without a setter: each would raise AttributeError in a loop at run time, so submit and
    ``stormpy local`` refuse it up front (one line naming the attribute). Empty when fine."""
    frozen: dict[str, str] = {}
    for name in dir(cls):
        value = inspect.getattr_static(cls, name, None)
        if isinstance(value, property) and value.fset is None:
            owner = next((b for b in cls.__mro__ if vars(b).get(name) is value), cls)
            if owner.__module__.startswith("stormpy."):
                frozen[name] = owner.__name__
    if not frozen:
        return []
    found = []
    for base in cls.__mro__:
        if base.__module__.startswith("stormpy.") or base is object:
            continue
        for value in vars(base).values():
            fn = getattr(value, "__func__", value)
            if not inspect.isfunction(fn):
                continue
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
            except (OSError, TypeError, SyntaxError):
                continue
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                        and isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in frozen):
                    found.append(f"{base.__qualname__}.{fn.__name__} assigns self.{node.attr}, which "
                                 f"{frozen[node.attr]} defines read-only: use another attribute name")
    return found
