"""The executor: one thread that runs tasks ``start..end`` of one component.

What every executor shares (the spout and bolt executors add their loops):

- A receive queue (``SimpleQueue`` of ``(task_id, [message, ...])`` batches, never one item
  per tuple) with a tuple count guarded by a lock taken once per batch; the count drives
  backpressure (``overloaded`` between the high and low watermarks).
- An Outbox (``stormpy.task.emit``): per destination task, a list of messages; handed to
  ``transfer.send`` when it reaches ``topology.transfer.batch.size``, after
  ``topology.batch.flush.interval.millis``, or when the executor goes idle. Bolts' acks are
  XOR-combined per root id and join the outbox at flush time.
- Settings: one frozen ``ExecutorSettings`` read from the component's config.
- Timers run on the executor thread (tick tuples, ``on_timer``, timeouts, stats snapshots).
- Crash handling: user code that raises is logged with component and task id, reported,
  the tuples the task held are failed, and the task is re-created after a backoff while the
  executor's other tasks (and every other executor) keep running.
- Control calls (activate, deactivate, flush at shutdown) are queued as ``(None, fn)`` items
  so they run on the executor thread like everything else.
"""
from __future__ import annotations

import functools
import logging
import pickle
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from stormpy.serialization import from_conf
from stormpy.api.component import Component
from stormpy.task.context import TopologyContext
from stormpy.task.emit import Message, Outbox
from stormpy.task.grouping import build_routes
from stormpy.task.settings import ExecutorSettings
from stormpy.task.stats import ExecutorStats
from stormpy.task.tree import EmitFn, TupleTrees

if TYPE_CHECKING:
    from stormpy.task.runtime import WorkerRuntime

log = logging.getLogger(__name__)

_MAX_BACKOFF_SECS = 30.0


def load_component_class(class_name: str) -> type[Component]:
    """Import ``module:Class`` (the way compile_topology names user code)."""
    from stormpy.api.compile import resolve_class

    cls = resolve_class(class_name)  # classes compiled in this process first, else import
    if not isinstance(cls, type):
        raise TypeError(f"{class_name} is not a class")
    return cls


def not_an_exception() -> Exception:
    """The object being raised, from inside a bare ``except:``, when it is no exception at all.

    A C extension can leave one: confluent-kafka on Python < 3.12 raises an exception that a
    C call raised inside one of its callbacks again as that exception's bare value, a
    ``KafkaError``, which is no ``BaseException`` subclass, so ``except Exception`` and
    ``except BaseException`` both miss it and it would end the executor thread unreported.
    Wrapped in a RuntimeError it is reported and handled like any other error.
    """
    value = sys.exc_info()[1]
    return RuntimeError(f"{type(value).__module__}.{type(value).__qualname__} raised, which is no "
                        f"exception (a C extension's bug): {value!r}")


class ReceiveQueueMetrics(Mapping[str, float]):
    """The executor's receive queue as task metrics, read live by whoever reads the stats (the
    heartbeat thread): Storm 2's ``__receive.population`` / ``__receive.pct_full`` and
    ``__backpressure`` (1 while the queue is over its high watermark, which is what makes this
    worker signal backpressure). The UI colours a component by them. Reads need no lock: each
    value is one int/bool read, and a heartbeat a tuple batch stale is fine."""

    NAMES = ("__receive.population", "__receive.pct_full", "__backpressure")

    def __init__(self, executor: "Executor[Any]") -> None:
        self._executor = executor

    def __getitem__(self, name: str) -> float:
        ex = self._executor
        if name == "__receive.population":
            return float(ex.queued)
        if name == "__receive.pct_full":
            return round(100.0 * ex.queued / max(1, ex.settings.receive_buffer_size), 2)
        if name == "__backpressure":
            return 1.0 if ex.overloaded else 0.0
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.NAMES)

    def __len__(self) -> int:
        return len(self.NAMES)


class Waker(Protocol):
    """What an executor needs of the scheduler that runs it (``stormpy.task.scheduler``)."""

    idle: bool

    def wake(self) -> None:
        """A batch or call arrived for an executor while the scheduler waits idle."""

    def hand_off(self, executor: Executor[Any]) -> None:
        """``executor``'s step has run past a flush interval: send what the round held back
        until now (the loop's combined acks, its batches for other workers), on the step's
        thread."""


class Timer:
    """A periodic call on the executor thread."""

    __slots__ = ("interval", "due", "fn", "name")

    def __init__(self, interval: float, fn: Callable[[], None], name: str, now: float) -> None:
        self.interval = max(float(interval), 0.001)
        self.due = now + self.interval
        self.fn = fn
        self.name = name


class TaskBase:
    """One task of an executor: its component instance and the calls the component makes.

    Subclasses implement the component contract (``stormpy.api.contract``): what a component
    may call here is written there; the rest of a task is the executor's business.
    """

    #: The task's ``emit`` (``stormpy.task.emit.make_emit``), set by each kind of task.
    emit: EmitFn

    def __init__(self, executor: "Executor[Any]", task_id: int) -> None:
        self.executor = executor
        #: The executor's tuple-tree arithmetic (``stormpy.task.tree``), shared by its tasks.
        self.trees: TupleTrees = executor.trees
        self.task_id = task_id
        self.component_id = executor.component_id
        self.component: Any = None       # the Spout or Bolt instance; None while the task is down
        runtime = executor.runtime
        self.context = TopologyContext(executor.plan, executor.component_id, task_id,
                                       runtime.local_tasks, runtime.host, runtime.port,
                                       transactional_state=runtime.transactional_state)
        self.routes = build_routes(executor.plan, executor.component_id, self.context,
                                   executor.runtime.local_tasks)
        self.restarts = 0
        self.failed_starts = 0     # crashes since the task last initialized successfully
        self.down_until = 0.0
        self._reported: BaseException | None = None

    def report_error(self, text: str, then: Callable[[], object] | None = None) -> None:
        if then is not None:   # guarded like the component's own code, and only for this instance
            then = functools.partial(self.executor._component_callback, self, self.component, then)
        self.executor.report_error(self.task_id, text, then)

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on this task's executor thread (any thread may call it)."""
        self.executor.call_soon(fn)

    def mark_reported(self, exc: BaseException) -> None:
        """``raise_exception`` already reported ``exc``: the crash handler must not repeat it."""
        self._reported = exc

    def was_reported(self, exc: BaseException) -> bool:
        reported, self._reported = self._reported, None
        return reported is exc

    def on_crash(self) -> None:
        """Fail (or drop) what this task held; subclasses know what that is."""


TaskT = TypeVar("TaskT", bound=TaskBase)


class Executor(Generic[TaskT]):
    """Base class: queue, outbox, timers, lifecycle and crash handling of one executor."""

    kind = "bolt"
    task_class: type[TaskT]

    def __init__(self, runtime: WorkerRuntime, start: int, end: int) -> None:
        self.runtime = runtime
        self.plan = runtime.plan
        self.start_task, self.end_task = start, end
        self.task_ids = list(range(start, end + 1))
        self.component_id = self.plan.task_component[start]
        self.comp_plan = self.plan.components[self.component_id]
        self.conf = self.comp_plan.conf
        self.settings = ExecutorSettings.from_conf(self.conf)
        self.serialization = from_conf(self.conf)
        self.high_watermark = self.settings.high_watermark
        self.low_watermark = self.settings.low_watermark
        self.acker_tasks: list[int] = list(self.plan.acker_tasks)
        self.num_ackers = len(self.acker_tasks)

        self.queue: SimpleQueue[tuple[int | None, Any]] = SimpleQueue()
        self._qlock = threading.Lock()
        self.queued = 0
        self.overloaded = False
        self.name = f"{self.component_id}[{start}-{end}]"
        self.outbox = Outbox(runtime.transfer.send, self.settings.transfer_batch_size, self.name)
        self.trees: TupleTrees = TupleTrees(self.outbox, self.acker_tasks, start)
        local: Any = getattr(runtime, "local_tasks", ())
        home = [i for i, t in enumerate(self.acker_tasks) if t in local]
        if home and len(home) < self.num_ackers:
            # Trees this executor starts are acked in its own worker (see TupleTrees.home_acker),
            # spread over the worker's ackers by task id; only a bolt's acks cross workers.
            self.trees.home_acker(home[start % len(home)])
        self._last_flush = time.monotonic()
        self.next_timer = 0.0     # step(): when timers are next due (at most 50 ms ahead)
        self.stats = ExecutorStats(self.kind)
        #: the fast emit paths' counts, added to ``stats`` at each flush and batch handed over
        #: (``emit.count_ticks``)
        self.stat_folds: list[Callable[[], None]] = self.outbox.folds
        self.stats.metric_sources.append(ReceiveQueueMetrics(self))
        self.tasks: dict[int, TaskT] = {}
        self.timers: list[Timer] = []
        self._stop = threading.Event()
        self._stop_reason = ""
        self._started = threading.Event()
        self.thread: threading.Thread | None = None
        self.loop_restarts = 0     # framework errors that restarted the loop (never silent)
        #: The scheduler running this executor among others on one thread (None: own thread);
        #: ``enqueue`` wakes it when it waits idle.
        self.waker: Waker | None = None

    # ------------------------------------------------------------ other threads
    def enqueue(self, task_id: int | None, messages: Any) -> None:
        """Hand a batch to this executor (transport threads, other executors). The list is
        handed over: the caller keeps no use of it (a step may extend it in place, joining the
        task's next batch to it, ``BoltExecutor._take_joined``)."""
        n = len(messages) if task_id is not None else 0
        with self._qlock:
            self.queued += n
            if self.queued > self.high_watermark:
                self.overloaded = True
            self.queue.put((task_id, messages))
        if self.waker is not None and self.waker.idle:
            self.waker.wake()

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the executor thread (activate, deactivate, flush requests)."""
        self.queue.put((None, fn))
        if self.waker is not None and self.waker.idle:
            self.waker.wake()

    def start(self) -> None:
        """Start the executor thread (unless a scheduler runs it); in a worker it runs under the worker's ThreadGuard, so even
        an exception that escapes start-up or shutdown is reported (the loop restarts itself)."""
        if self.waker is not None:
            return
        guard = getattr(self.runtime, "thread_guard", None)
        if guard is not None:
            self.thread = guard.start_thread(f"executor-{self.name}", self._thread_main, restart=False)
            return
        self.thread = threading.Thread(target=self._thread_main, name=f"executor-{self.name}", daemon=True)
        self.thread.start()

    def wait_started(self, timeout: float) -> bool:
        return self._started.wait(timeout)

    def stop(self, reason: str = "stop requested") -> None:
        """Ask the thread to finish: it flushes, calls ``close`` on its tasks and exits."""
        self._stop_reason = reason
        self._stop.set()
        self.call_soon(lambda: None)  # wake a blocked get()

    def join(self, timeout: float) -> bool:
        if self.thread is None:
            return True
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def has_outbox(self) -> bool:
        return bool(self.outbox)

    def in_flight(self) -> int:
        """Tuples queued here plus messages waiting in the outbox (approximate)."""
        return self.queued + len(self.outbox)

    # ------------------------------------------------------------ executor thread
    def _thread_main(self) -> None:
        pin = getattr(self.runtime, "pin_thread", None)
        if pin is not None:
            pin()  # share one core with the runtime's other threads (see runtime.choose_cpu)
        try:
            if self.setup():
                self._run_loop()
        finally:
            self._started.set()
            self._shutdown()

    def setup(self) -> bool:
        """Create and initialize the tasks and timers (on the thread that runs the executor);
        False when the executor died starting (reported: it only shuts down then)."""
        try:
            now = time.monotonic()
            self.add_timer(30.0, lambda: self.stats.snapshot_if_due(), "stats")
            for task_id in self.task_ids:
                task = self.task_class(self, task_id)
                self.tasks[task_id] = task
                self._start_task(task)
            self._setup_timers(now)
            return True
        except Exception as exc:
            log.exception("executor %s died while starting", self.name)
            self._framework_error(None, exc, "executor start")
            return False
        finally:
            self._started.set()

    def step(self) -> float:
        """One round of the loop that never blocks, for a scheduler running several executors
        on one thread (``stormpy.task.scheduler``): 0.0 when it did work (run another round
        soon), else the seconds it could wait for nothing but a new batch."""
        raise RuntimeError("executor subclasses define the step")

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run_on_own_thread(self) -> None:
        """Continue this (started) executor's loop on the calling thread until it stops (a
        scheduler hands over an executor that blocks)."""
        self.thread = threading.current_thread()
        try:
            self._run_loop()
        finally:
            self._shutdown()

    def _run_loop(self) -> None:
        """Run the loop until stop; a framework exception restarts it, never ends the thread.

        User code is guarded where it is called; this catches what escapes the framework
        itself (a bug, a message of a shape nothing expected). It is reported as an error
        of every task of the executor, the tasks are re-created as after a crash, and the
        loop resumes after the restart backoff.
        """
        failures = 0
        while not self._stop.is_set():
            try:
                try:
                    self._loop()
                    return
                except BaseException:
                    raise
                except:  # noqa: E722 - only what is no exception gets here
                    raise not_an_exception() from None
            except Exception as exc:
                failures += 1
                self.loop_restarts += 1
                log.exception("executor %s: framework error in its loop (restart #%d)", self.name, failures)
                for task in list(self.tasks.values()):
                    self._framework_error(task, exc, "executor loop")
                guard = getattr(self.runtime, "thread_guard", None)
                if guard is not None and not guard.failed(f"executor-{self.name}", exc, handled="loop restarted"):
                    return   # the worker gives up on its threads (it exits, the supervisor restarts it)
                self._stop.wait(min(self.settings.restart_backoff_secs * (2 ** min(failures, 8)),
                                    _MAX_BACKOFF_SECS))

    def _framework_error(self, task: TaskT | None, exc: BaseException, where: str) -> None:
        """Framework code raised for ``task``: report it and restart the task like a user crash."""
        if task is None:
            for task_id in self.task_ids:
                self.report_error(task_id, f"{where}: " + "".join(traceback.format_exception(exc)))
            return
        if task.component is None:
            # Already down (a restart is scheduled): report only.
            self.report_error(task.task_id, f"{where}: " + "".join(traceback.format_exception(exc)))
            return
        try:
            self._crash(task, exc, where)
        except Exception:
            log.exception("executor %s: handling a framework error of task %d failed", self.name, task.task_id)

    def add_timer(self, interval: float, fn: Callable[[], None], name: str) -> Timer:
        timer = Timer(interval, fn, name, time.monotonic())
        self.timers.append(timer)
        self.next_timer = 0.0
        return timer

    def _setup_timers(self, now: float) -> None:
        """Subclasses add tick, timeout and component timers here."""

    def _run_timers(self, now: float) -> float:
        """Run due timers; return seconds until the next one."""
        wait = 1.0
        for timer in self.timers:
            if now >= timer.due:
                timer.due = now + timer.interval
                try:
                    timer.fn()
                except Exception:
                    log.exception("executor %s: timer %s failed", self.name, timer.name)
            wait = min(wait, timer.due - now)
        return max(wait, 0.0)

    def _take(self, item: tuple[int | None, Any]) -> None:
        """Account for a dequeued batch (backpressure) and dispatch it."""
        task_id, payload = item
        if task_id is None:
            payload()
            return
        n = len(payload)
        with self._qlock:
            self.queued -= n
            if self.overloaded and self.queued < self.low_watermark:
                self.overloaded = False
        task = self.tasks.get(task_id)
        if task is None:
            log.warning("executor %s: messages for unknown task %s dropped", self.name, task_id)
            return
        try:
            self._on_messages(task, payload)
        except Exception as exc:  # framework code, not the component: user code is guarded inside
            self._framework_error(task, exc, "receive (framework)")

    def _on_messages(self, task: TaskT, messages: list[Message]) -> None:
        raise RuntimeError("executor subclasses handle messages")

    def _loop(self) -> None:
        raise RuntimeError("executor subclasses define the loop")

    # ------------------------------------------------------------ outbox
    def flush(self) -> None:
        """Hand every partly filled batch to the transfer (bolts' combined acks first); the
        fast emit paths' counts join the stats."""
        for fold in self.stat_folds:
            fold()
        self.trees.flush()
        self.outbox.flush()
        self._last_flush = time.monotonic()

    def _flush_if_due(self, now: float) -> None:
        if (self.outbox or self.trees.has_acks()) and (now - self._last_flush >= self.settings.flush_interval_secs
                                                       or self.queue.empty()):
            self.flush()

    # ------------------------------------------------------------ task lifecycle
    def report_error(self, task_id: int, text: str, then: Callable[[], object] | None = None) -> None:
        """``then`` (see the component contract) comes back through ``call_soon`` whichever thread
        the reporter calls it from."""
        kept = None if then is None else functools.partial(self.call_soon, then)
        try:
            self.runtime.reporter.report_error(self.component_id, task_id, text, then=kept)
        except Exception:
            log.exception("executor %s: reporting an error failed", self.name)
            if kept is not None:
                kept()

    def _new_component(self, task: TaskT) -> Component:
        """A fresh instance: unpickled from the plan's serialized one (each task gets its own
        copy), else the class called with the plan's ``init_args`` (none for user classes)."""
        serialized = self.comp_plan.serialized
        if serialized is not None:
            component = pickle.loads(serialized)
            if not isinstance(component, Component):
                raise TypeError(f"serialized component {self.comp_plan.class_name} is a "
                                f"{type(component).__name__}, not a stormpy Spout or Bolt")
        else:
            component = load_component_class(self.comp_plan.class_name)(*self.comp_plan.init_args)
        component._attach(task, self.component_id, task.task_id)
        self.stats.metric_sources.append(component.metrics)
        return component

    def _start_task(self, task: TaskT) -> None:
        """Create and initialize the task's component; a failure schedules a restart."""
        component = None
        try:
            component = self._new_component(task)
            task.component = component
            self._bind(task)
            stormconf = dict(self.conf)
            component._set_context(stormconf, task.context)
            component.initialize(stormconf, task.context)
        except Exception as exc:
            self._crash(task, exc, "initialize")
            return
        task.failed_starts = 0  # initialized: only consecutive failures to start grow the backoff
        interval = component.timer_interval_secs
        if interval:
            self.add_timer(interval, functools.partial(self._component_timer, task, component),
                           f"on_timer:{task.task_id}")

    def _bind(self, task: TaskT) -> None:
        """Subclasses cache the component's bound methods on the task."""

    def _component_callback(self, task: TaskT, component: Component | None, fn: Callable[[], object]) -> None:
        """A component's ``report_error`` ``then``: dropped for a crashed or closed instance (asked
        for while the task was down: from ``close()``); a raise crashes the task."""
        if component is None or task.component is not component:
            return
        try:
            fn()
        except Exception as exc:
            self._crash(task, exc, "report_error then")

    def _component_timer(self, task: TaskT, component: Component) -> None:
        if task.component is not component:
            return  # a crashed instance's timer
        try:
            component.on_timer()
        except Exception as exc:
            self._crash(task, exc, "on_timer")

    def _crash(self, task: TaskT, exc: BaseException, where: str) -> None:
        """User code raised: report, fail what the task held, schedule a re-created instance."""
        text = "".join(traceback.format_exception(exc))
        log.error("component %s task %d raised in %s (restart in %.1fs): %s",
                  self.component_id, task.task_id, where, self._backoff(task), text.rstrip())
        if not task.was_reported(exc):
            self.report_error(task.task_id, f"{where}: {text}")
        component = task.component
        try:
            task.on_crash()
        except Exception:
            log.exception("executor %s: failing the tuples of task %d failed", self.name, task.task_id)
        task.component = None
        self.timers = [t for t in self.timers if t.name != f"on_timer:{task.task_id}"]
        if component is not None:
            metrics = getattr(component, "metrics", None)
            self.stats.metric_sources = [m for m in self.stats.metric_sources if m is not metrics]
            try:
                component.close()
            except Exception:
                log.debug("close() of crashed task %d raised", task.task_id, exc_info=True)
        delay = self._backoff(task)
        task.restarts += 1
        task.failed_starts += 1
        task.down_until = time.monotonic() + delay
        self.timers.append(Timer(delay, lambda: self._restart(task), f"restart:{task.task_id}", time.monotonic()))
        self.next_timer = 0.0

    def _backoff(self, task: TaskT) -> float:
        """The pause before a crashed task is re-created.

        ``task.failed_starts`` counts crashes since the task last initialized successfully, so a bolt
        that raises on an occasional tuple restarts after the plain short backoff (its tuples fail
        and replay), while one that cannot even initialize backs off exponentially.
        """
        backoff = self.settings.restart_backoff_secs
        return float(min(backoff * (2 ** min(task.failed_starts, 8)), max(backoff, _MAX_BACKOFF_SECS)))

    def _restart(self, task: TaskT) -> None:
        self.timers = [t for t in self.timers if t.name != f"restart:{task.task_id}"]
        if self._stop.is_set():
            return
        log.info("restarting component %s task %d (restart #%d)", self.component_id, task.task_id, task.restarts)
        self._start_task(task)
        if task.component is not None:
            self._after_restart(task)

    def _after_restart(self, task: TaskT) -> None:
        """Subclasses resume work the task missed while it was down."""

    def before_close_tasks(self) -> None:
        """Bolt executors ask each task's driver to hand over held-back work."""

    def _shutdown(self) -> None:
        try:
            self.before_close_tasks()
        except Exception:
            log.exception("executor %s: flushing its tasks at shutdown failed", self.name)
        try:
            self.flush()
        except Exception:
            log.exception("executor %s: final flush failed", self.name)
        for task in self.tasks.values():
            component = task.component
            if component is None:
                continue
            try:
                component.close()
            except Exception:
                log.exception("component %s task %d raised in close()", self.component_id, task.task_id)
        log.debug("executor %s stopped: %s", self.name, self._stop_reason or "its thread ended")
