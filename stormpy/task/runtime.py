"""WorkerRuntime: the executors of one worker process (or of ``stormpy local``).

The runtime builds one executor per ``(task_start, task_end)`` range it is given, routes
incoming batches to the right executor (``receive``), and exposes what the worker around it
needs: activation, backpressure state, stats and a clean, draining stop. It owns no sockets:
outgoing batches go to ``transfer.send(task_id, messages)`` (in-process queues for the local
runner, ZeroMQ for remote tasks in a cluster worker).

Threads: ``receive`` is called by transport threads and executor threads; everything else
by the owner (local runner or worker main thread). Executors run on their own threads.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from stormpy import config as cfg
from stormpy import streams

from stormpy.task.bolt_executor import BoltExecutor
from stormpy.topology.plan import ExecutorRange, TopologyPlan
from stormpy.task.executor import Executor
from stormpy.task.scheduler import ExecutorLoop
from stormpy.task.settings import ExecutorSettings
from stormpy.task.spout_executor import SpoutExecutor

log = logging.getLogger(__name__)

_START_TIMEOUT_SECS = 60.0
_JOIN_TIMEOUT_SECS = 10.0


_GC_GEN0_THRESHOLD = 50000
#: Tracked (container) objects one tuple tree in flight keeps alive: its message, the spout's
#: pending entry, the acker's ledger entry, ...; measured 4 (spout -> SparkSinkBolt).
_GC_OBJECTS_PER_TREE = 4
_GC_GEN0_MAX = 1_000_000
#: ``sys.setswitchinterval`` of a worker whose executors share the loop (see ``start``).
_LOOP_SWITCH_SECS = 0.001


def tune_gc(trees_in_flight: int = 0) -> None:
    """Make the cyclic garbage collector cheap for a process that streams tuples.

    Every tuple allocates a few container objects (message tuple, anchors tuple, Tuple), so
    with the default gen-0 threshold of 700 the collector runs thousands of times a second
    and each older-generation pass walks every module and class loaded at start-up. Tuples
    form no cycles, so collecting less often loses nothing; ``gc.freeze()`` moves the
    start-up objects out of the collector's sight. Measured: roughly halves the cost per
    word in the word-count split bolt.

    The threshold also stays above what the spouts' ``topology.max.spout.pending`` lets the
    process hold in flight (``trees_in_flight``, up to ``_GC_GEN0_MAX`` trees' objects): below
    it every tree's objects are walked by a gen-0 pass while they wait for their acks (a
    SparkSinkBolt holds two 50k-row batches: 53 passes, ~0.4 us per row, against 3 with the
    threshold sized; an engine whose trees complete at once gains nothing, nor loses).
    """
    # 1.5x: room for what is allocated between two acked batches
    wanted = min(_GC_GEN0_MAX, max(_GC_GEN0_THRESHOLD, int(1.5 * _GC_OBJECTS_PER_TREE * trees_in_flight)))
    gen0, gen1, gen2 = gc.get_threshold()
    if gen0 and gen0 < wanted:
        gc.set_threshold(wanted, max(gen1, 20), max(gen2, 100))
    gc.freeze()


def choose_cpu() -> int | None:
    """The one CPU a runtime's Python threads share, or None to leave placement to the OS.

    The GIL lets one of the process's threads run Python at a time anyway, but the OS spreads
    them over the cores, so every tuple handed from one executor to the next crosses caches
    (message, values, anchors, Tuple are written on one core and read on another).
    Keeping the threads on one core measured +20-30% counted words/s on the local word count
    (2-core machine, same minute). Only ``stormpy local`` asks for it: workers of one host
    cannot tell which core another worker took (port-based choices put both benchmark
    workers on one core, halving throughput). The core is the one the caller runs on now,
    which the scheduler picked as not busy. ``STORMPY_PIN_CPU=0`` turns it off.
    """
    if os.environ.get("STORMPY_PIN_CPU", "1") == "0" or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except OSError:
        return None
    if len(allowed) < 2:
        return None
    try:
        with open("/proc/thread-self/stat") as f:
            current = int(f.read().rsplit(")", 1)[1].split()[36])  # field 39: last CPU
    except (OSError, ValueError, IndexError):
        current = allowed[0]
    return current if current in allowed else allowed[0]


def slot_cpu(port: int, slot_ports: Iterable[Any],
             pinned: Callable[[list[int]], dict[int, int]] | None = None) -> int | None:
    """The one CPU a cluster worker's busy threads (its executor loop, its transport's send and
    receive threads) share: the worker's port's index among its supervisor's
    ``supervisor.slots.ports``, round the CPUs the process may use, unless more of the host's
    other workers are pinned there than to another CPU (``pinned``, by default
    :func:`pinned_workers`: several supervisors on one host, as in tests with a network
    namespace per host, each number their slots from 0): then the least used CPU, the next
    after the slot's in order on a tie. None (the OS places them) with ``STORMPY_PIN_CPU=0``,
    fewer than two CPUs, or a port that is not a slot port.

    Why: unpinned, the OS moves a worker's threads between the cores, and every batch handed
    from the receive thread to the loop, and from the loop to the send thread, is read from
    another core's cache; both workers' threads also bounce between the two cores. Pinned, each
    worker of the cluster word count (2 workers, 2 cores) counted 10-15% more words
    (alternating runs, pure Python: 765k and 805k words/s against 663k and 730k). The slot's
    index, not the port number (two even ports once put both benchmark workers on one core),
    gives a supervisor's workers different cores while it has no more slots than cores; the
    count of the host's pinned workers keeps a second supervisor's from piling onto the same.
    """
    if os.environ.get("STORMPY_PIN_CPU", "1") == "0" or not hasattr(os, "sched_getaffinity"):
        return None
    try:
        allowed = sorted(os.sched_getaffinity(0))
        ports = sorted({int(p) for p in slot_ports})
    except (OSError, TypeError, ValueError):
        return None
    if len(allowed) < 2 or port not in ports:
        return None
    first = ports.index(port) % len(allowed)
    used = (pinned or pinned_workers)(allowed)
    in_order = allowed[first:] + allowed[:first]   # the slot's CPU first, then the next ones
    return min(in_order, key=lambda cpu: used.get(cpu, 0))


#: What names a stormpy worker process in its command line (``supervisor.launcher.worker_command``).
_WORKER_ARGV = b"stormpy.worker"


def pinned_workers(cpus: list[int]) -> dict[int, int]:
    """{CPU: other stormpy worker processes of this host with threads pinned to it alone}, read
    from ``/proc`` (a few milliseconds, once per worker start); empty where it cannot be read."""
    used: dict[int, int] = {}
    me = os.getpid()
    try:
        pids = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return used
    for pid in pids:
        cpu = worker_cpu(pid) if pid != me else None
        if cpu is not None and cpu in cpus:
            used[cpu] = used.get(cpu, 0) + 1
    return used


def worker_cpu(pid: int) -> int | None:
    """The CPU a stormpy worker process pinned threads to, or None (not a worker, not pinned,
    gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if _WORKER_ARGV not in f.read():
                return None
        for tid in os.listdir(f"/proc/{pid}/task"):
            mask = os.sched_getaffinity(int(tid))
            if len(mask) == 1:
                return next(iter(mask))
    except (OSError, ValueError):   # the process or thread ended meanwhile
        return None
    return None


@contextlib.contextmanager
def process_affinity() -> Iterator[None]:
    """Run the block with the whole process's CPU set, then restore the calling thread's own.

    Executor threads may be pinned to one core (``choose_cpu``, ``slot_cpu``), and a child
    process inherits the mask of the thread that starts it: the framework starts its children
    (the Spark JVM, a multilang subprocess) inside this block, so that ``local[*]`` means every
    core and a shell bolt does not share the worker's.
    """
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    try:
        # the process's mask is its main thread's (pid): stormpy pins executor and transport
        # threads, never the main thread
        mine, process = os.sched_getaffinity(0), os.sched_getaffinity(os.getpid())
    except OSError:
        yield
        return
    widened = mine != process
    if widened:
        try:
            os.sched_setaffinity(0, process)
        except OSError as exc:   # a restricted container: the child shares this thread's cores
            log.debug("runtime: cannot widen this thread's CPUs for a child: %s", exc)
            widened = False
    try:
        yield
    finally:
        if widened:
            os.sched_setaffinity(0, mine)


EXECUTOR_THREADS = ("auto", "one", "per-executor")


def executor_threads(conf: Mapping[str, Any], one_by_default: bool) -> str:
    """``one`` or ``per-executor`` from ``topology.executor.threads`` (``auto``: the default of
    the caller); a value outside the three is a ConfigError naming them."""
    value = str(cfg.read(conf, cfg.TOPOLOGY_EXECUTOR_THREADS)).strip().lower()
    if value not in EXECUTOR_THREADS:
        raise cfg.ConfigError(f"{cfg.TOPOLOGY_EXECUTOR_THREADS.name} must be one of "
                              f"{', '.join(EXECUTOR_THREADS)}, not {value!r}")
    if value == "auto":
        return "one" if one_by_default else "per-executor"
    return value


class RoundSends:
    """``transfer.send`` for executors a scheduler loop runs: batches for other workers wait
    for the end of the loop's round and go to the transfer together (``send_many``, which
    packs them on the loop's thread, one frame per peer).

    Why: each ``transfer.send`` of a remote batch is a queue put that wakes the send thread,
    which then takes the GIL from the loop thread to pack a frame of that one batch. Handed
    over once per round, the send thread wakes once and the frames are bigger. Batches for
    tasks of this process are delivered at once (the next executor of the round takes them);
    calls from other threads (an executor moved to its own thread, the transport itself) go
    straight to the transfer, as without a loop.
    """

    def __init__(self, transfer: Any, local_tasks: set[int]) -> None:
        self.transfer = transfer
        self._local = local_tasks
        self._send = transfer.send
        self._send_many = transfer.send_many
        self._lock = threading.Lock()
        self._held: list[tuple[int, Any]] = []
        #: The loop whose thread's sends are held (set once the loop exists).
        self.loop: ExecutorLoop | None = None

    def send(self, task_id: int, messages: Any) -> None:
        loop = self.loop
        if task_id in self._local or loop is None or threading.get_ident() != loop.ident:
            self._send(task_id, messages)
            return
        with self._lock:
            self._held.append((task_id, messages))

    def release(self) -> None:
        """Hand what the round held to the transfer (the loop's ``after_round``)."""
        if not self._held:
            return
        with self._lock:
            held, self._held = self._held, []
        self._send_many(held)


class LoggingReporter:
    """Default reporter: errors go to the log and the newest ones are kept per component."""

    def __init__(self, keep: int = 10) -> None:
        self.keep = keep
        self.errors: dict[str, list[tuple[float, int, str]]] = {}

    def report_error(self, component_id: str, task_id: int, text: str,
                     then: Callable[[], object] | None = None) -> None:
        """``then`` runs once the error is kept: here at once (a reporter's protocol, see ErrorReporter)."""
        log.error("error in component %s task %d: %s", component_id, task_id, text.rstrip())
        kept = self.errors.setdefault(component_id, [])
        kept.append((time.time(), task_id, text))
        del kept[:-self.keep]
        if then is not None:
            then()


class WorkerRuntime:
    """Executors for a set of task ranges of one topology plan."""

    def __init__(self, plan: TopologyPlan, executors: Iterable[ExecutorRange], transfer: Any, reporter: Any = None,
                 host: str = "localhost", port: int = 0, pin_cpu: bool = False,
                 transactional_state: Any = None, one_thread_by_default: bool = False,
                 cpu: int | None = None, pacers_apart: bool = False) -> None:
        """``one_thread_by_default``: ``topology.executor.threads: auto`` means one scheduler
        thread for all executors (``stormpy local``), else a thread per executor. ``pin_cpu``:
        the executor threads share the core the caller runs on (``choose_cpu``); ``cpu``: they
        share that one (a cluster worker's ``slot_cpu``), as do the threads that call
        ``pin_thread``. ``pacers_apart`` (a cluster worker): a scheduler loop leaves Trident's
        coordinators (``streams.paces_others``) to threads of their own.

        Why only there: a cluster worker waits on the other worker between batches (the Trident
        word count's workers were busy half the time, each ``$commit`` and ack waiting behind
        whole batch steps in the loops): with the coordinators apart, ``trident_wordcount.py
        --cluster`` committed 3.4-3.7M words/s against 2.3M (alternating runs, pure). Under
        ``stormpy local`` one core does everything, it is never idle, and apart they only added
        GIL hand-offs: 4.2M against 4.5M committed words/s (MemoryMapState, two pairs)."""
        self.plan = plan
        #: Handed to every task as ``context.transactional_state`` (Trident's coordinator state).
        self.transactional_state = transactional_state
        self.transfer = transfer
        self.reporter = reporter if reporter is not None else LoggingReporter()
        #: A worker's ThreadGuard (set before ``start``): executor threads run under it and their
        #: loop failures count toward its budget. None in ``stormpy local``.
        self.thread_guard: Any = None
        self.host = host
        self.port = port
        ranges = [(int(s), int(e)) for s, e in executors]
        self.local_tasks: set[int] = {t for s, e in ranges for t in range(s, e + 1)}
        looped = [(s, e) for s, e in ranges if not (pacers_apart and streams.paces_others(plan.task_component[s]))]
        one_loop = executor_threads(plan.conf, one_thread_by_default) == "one" and bool(looped)
        # A transport with a send thread (send_many) takes a loop's remote batches per round.
        self._round_sends: RoundSends | None = None
        if one_loop and hasattr(transfer, "send_many"):
            self.transfer = self._round_sends = RoundSends(transfer, self.local_tasks)
        #: (component, stream) -> the rows its tasks' fast emits share (``tree.new_row``, which says
        #: why one per component and worker, and why threads may share it)
        self.emit_rows: dict[tuple[str, str], dict[str, Any]] = {}
        self.executors: dict[ExecutorRange, Executor[Any]] = {}
        self._by_task: dict[int, Executor[Any]] = {}
        for start, end in ranges:
            kind = plan.components[plan.task_component[start]].kind
            executor: Executor[Any] = (SpoutExecutor if kind == "spout" else BoltExecutor)(self, start, end)
            self.executors[(start, end)] = executor
            for task in range(start, end + 1):
                self._by_task[task] = executor
        self._spouts = [e for e in self.executors.values() if isinstance(e, SpoutExecutor)]
        self._all = list(self.executors.values())
        self._remote_backpressure = False
        self.settings = ExecutorSettings.from_conf(plan.conf)
        self._backpressure_enabled = self.settings.backpressure_enabled
        self.active = False
        self.started = False
        self.cpu = cpu if cpu is not None else choose_cpu() if pin_cpu else None
        #: The scheduler thread running every executor (``topology.executor.threads: one``), or None.
        self.loop: ExecutorLoop | None = None
        if one_loop:
            self.loop = self._make_loop([self.executors[r] for r in looped])

    def _make_loop(self, looped: list[Executor[Any]]) -> ExecutorLoop:
        """The scheduler loop over ``looped`` (the executors but those left apart, see __init__)."""
        loop = ExecutorLoop(looped, pin=self.pin_thread)
        apart = sorted(ex.name for ex in self._all if ex not in looped)
        if apart:
            log.info("executors %s (Trident's coordinators) run beside the executor loop, on threads "
                     "of their own", ", ".join(apart))
        if self._round_sends is not None:
            self._round_sends.loop = loop
            loop.after_round = self._round_sends.release
        return loop

    def pin_thread(self) -> None:
        """Pin the calling thread to the runtime's CPU (executor and transport threads call it)."""
        if self.cpu is None:
            return
        try:
            os.sched_setaffinity(0, {self.cpu})  # pid 0: the calling thread only, on Linux
        except OSError as exc:
            log.debug("runtime: cannot pin thread to CPU %d: %s", self.cpu, exc)

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start every executor thread; returns once each has initialized its tasks."""
        tune_gc(sum(ex.settings.max_spout_pending * (ex.end_task - ex.start_task + 1)
                    for ex in self._all if ex.kind == "spout"))
        if self._round_sends is not None:
            # The loop thread always has work under load and never blocks, so the transport's
            # threads get the GIL only when the interpreter forces a switch: after 5 ms by
            # default, a delay every frame pays on the way out and in (p50 complete latency
            # 8-22 ms at half the maximum rate, against 4-6 ms with a thread per executor).
            sys.setswitchinterval(min(sys.getswitchinterval(), _LOOP_SWITCH_SECS))
            if self.loop is not None:
                # 5 ms while the loop hardly waits (ExecutorLoop._pace), for threads the OS
                # spreads over the cores. Pinned to one core (slot_cpu), a hand-off stays in that
                # core's caches and 1 ms throughout counted more: the cluster word count, pure,
                # alternating runs, 813k-1,004k words/s against 701k-870k with the pacing
                # (compiled, two pairs, the same: 1.09M and 1.05M against 1.05M and 1.07M).
                self.loop.pace_switches = self.cpu is None
                self.loop.strikes_to_detach = 2  # a loaded machine's hiccup moves no executor
        if self.loop is not None:
            self.loop.guard = self.thread_guard
            self.loop.start()
        for executor in self._all:
            executor.start()   # no-op for those the loop runs
        deadline = time.monotonic() + _START_TIMEOUT_SECS
        for executor in self._all:
            if not executor.wait_started(max(0.0, deadline - time.monotonic())):
                log.warning("executor %s did not finish starting within %.0fs", executor.name, _START_TIMEOUT_SECS)
        self.started = True

    def set_active(self, active: bool) -> None:
        """Spouts call ``next_tuple`` only while active (activate/deactivate hooks run)."""
        self.active = active
        for spout in self._spouts:
            spout.set_active(active)

    def stop(self, drain_secs: float = 30.0, reason: str = "stop requested") -> None:
        """Deactivate spouts, drain in-flight tuples for up to ``drain_secs``, close, join."""
        log.debug("stopping %d executors (%s); draining for up to %.1fs", len(self._all), reason, drain_secs)
        self.set_active(False)
        drained = self.drain(drain_secs)
        if not drained:
            log.warning("stopping with %d tuples still in flight after %.1fs", self.in_flight(), drain_secs)
        for executor in self._all:
            executor.stop(reason)
        for executor in self._all:
            if not executor.join(_JOIN_TIMEOUT_SECS):
                log.warning("executor %s did not stop within %.0fs", executor.name, _JOIN_TIMEOUT_SECS)
        if self.loop is not None and not self.loop.join(_JOIN_TIMEOUT_SECS):
            log.warning("the executor loop's watchdog did not stop within %.0fs", _JOIN_TIMEOUT_SECS)
        self.started = False

    def drain(self, timeout_secs: float) -> bool:
        """Wait until no tuple is queued, buffered or pending; batching bolts are asked to flush."""
        deadline = time.monotonic() + max(0.0, timeout_secs)
        quiet_rounds = 0
        last_flush_request = 0.0
        flush_done: list[threading.Event] = []
        while True:
            queued = sum(e.queued + (1 if e.has_outbox() else 0) for e in self._all)
            pending = sum(s.pending_count() for s in self._spouts)
            now = time.monotonic()
            flushing = any(not done.is_set() for done in flush_done)
            if queued == 0 and pending == 0 and not flushing:
                quiet_rounds += 1
                if quiet_rounds >= 2 and last_flush_request:
                    return True
            else:
                quiet_rounds = 0
            # Once nothing moves, batching bolts hand over what they hold (also unacked
            # topologies, so batches reach downstream bolts before those stop).
            if queued == 0 and not flushing and (pending or not last_flush_request) and now - last_flush_request > 0.5:
                last_flush_request = now
                quiet_rounds = 0
                flush_done = []
                for executor in self._all:
                    done = threading.Event()
                    flush_done.append(done)
                    executor.call_soon(functools.partial(self._flush_components, executor, done))
            if now >= deadline:
                return False
            time.sleep(0.05)

    @staticmethod
    def _flush_components(executor: Executor[Any], done: threading.Event) -> None:
        """On the executor thread: drivers hand over held work (batching bolts run their batches)."""
        try:
            executor.before_close_tasks()
            executor.flush()
        finally:
            done.set()

    # ------------------------------------------------------------ transport
    def receive(self, task_id: int, messages: list[Any]) -> None:
        """Deliver a batch for one local task (called by the transfer and transports); the
        list is handed over (``Executor.enqueue``)."""
        executor = self._by_task.get(task_id)
        if executor is None:
            log.warning("runtime: %d messages for task %s, which is not here, dropped", len(messages), task_id)
            return
        executor.enqueue(task_id, messages)

    # ------------------------------------------------------------ backpressure
    def is_overloaded(self) -> bool:
        """True while any local receiver (or, as told, a remote one) is over its high watermark."""
        if not self._backpressure_enabled:
            return False
        if self._remote_backpressure:
            return True
        for executor in self._all:
            if executor.overloaded:
                return True
        return False

    def is_locally_overloaded(self) -> bool:
        """True while one of this runtime's own executors is over its high watermark."""
        if not self._backpressure_enabled:
            return False
        return any(executor.overloaded for executor in self._all)

    def set_remote_backpressure(self, overloaded: bool) -> None:
        """The worker's transport reports that a remote receiver is (no longer) overloaded."""
        self._remote_backpressure = overloaded

    # ------------------------------------------------------------ stats
    def in_flight(self) -> int:
        return sum(e.in_flight() for e in self._all)

    def stats(self) -> dict[ExecutorRange, dict[str, Any]]:
        """Per executor: component, kind and all-time counters/latencies/metrics."""
        out = {}
        for key, executor in self.executors.items():
            entry = executor.stats.to_dict()
            entry["component"] = executor.component_id
            out[key] = entry
        return out

    def thrift_stats(self) -> dict[Any, Any]:
        """``{ExecutorInfo: storm.ExecutorStats}`` for a ClusterWorkerHeartbeat."""
        from stormpy.thrift import storm

        return {storm.ExecutorInfo(task_start=s, task_end=e): ex.stats.to_thrift()
                for (s, e), ex in self.executors.items()}

    def totals(self) -> dict[str, int]:
        """Sums for progress lines: spout emitted/acked/failed, bolt executed, errors."""
        out = {"emitted": 0, "acked": 0, "failed": 0, "executed": 0}
        for executor in self._all:
            if executor.comp_plan.is_system:
                continue
            counts = executor.stats.totals()
            metrics = executor.stats.metrics()
            if "trident.batches.committed" in metrics and executor.kind == "spout":   # $mastercoord
                out["trident_txid"] = int(metrics.get("trident.txid", 0))
                out["trident_batches"] = int(metrics["trident.batches.committed"])
            if executor.kind == "spout":
                out["emitted"] += counts["emitted"]
                out["acked"] += counts["acked"]
                out["failed"] += counts["failed"]
            else:
                out["executed"] += counts["executed"]
        return out
