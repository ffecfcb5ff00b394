"""ExecutorLoop: the executors of one process taking turns on one thread.

Why: under the GIL only one thread runs Python at a time, and in ``stormpy local`` every
thread is pinned to one core anyway (``runtime.choose_cpu``). With a thread per executor,
each batch handed from one executor to the next wakes a blocked thread, which must then win
the GIL (and the receive-queue lock) from the thread that is running: the OS and the GIL
take turns for us, at a cost per switch that grows with the number of executors
(parallelism 2 counted fewer words per CPU-second than parallelism 1). One thread that
calls each executor's ``step()`` in turn does the same work with no switch at all.

How: a round calls ``step()`` of every executor: a spout takes its acker answers, runs due
timers and calls ``next_tuple`` (while active, below ``topology.max.spout.pending`` and
without backpressure; up to 64 times per task, times the mean parallelism of the loop's bolts,
see :func:`size_spout_shares`); a bolt drains up to 64 batches from its queue. Each flushes what it
emitted, so the next executor in the round finds it. When no step did work the loop waits for
the shortest wait a step asked for (a spout's sleep, the next timer), or until a batch or a
control call arrives from another thread (``Executor.waker``). Timers, ticks, acking,
timeouts, backpressure and crash handling are the executors' own, as on their own threads.

The trade-off: a step is not pre-empted, so user code that blocks (sleeps, waits on I/O)
delays every other executor of the process. Two guards bound that: a step that spent more
than ``DETACH_SECS`` off the CPU (sleeping or waiting, not computing) hands its executor to
a thread of its own, and a watchdog does the same for a step that has not returned after
``STUCK_SECS`` (the others continue on a new loop thread). Such an executor then runs as
with ``topology.executor.threads: per-executor``; the log says so once. Time the loop thread
spent waiting while other threads of the process ran is not "blocked": in a cluster worker
the transfer threads hold the GIL for part of every round, and the loop thread waits for it.

Acks: the bolt executors of the loop settle their tuples into one dict (``tree.SharedAcks``),
which the loop flushes before the acker's step and at the end of every round; an executor
leaving the loop (stopped, moved to its own thread) settles into a dict of its own again.

Hand-offs to the other threads: ``after_round`` (set by the owner) runs at the end of every
round and before the loop waits: a worker's runtime packs the batches the round produced for
other workers there and hands the frames to the send thread in one queue operation
(``RoundSends``). A bolt's step that runs past a flush interval does the same mid-step
(:meth:`ExecutorLoop.hand_off`, with the combined acks), so that a long step working through a
backlog does not hold back the acks other workers' spouts wait for.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from stormpy.streams import ACKER_COMPONENT, is_system_id
from stormpy.task.executor import Executor, not_an_exception
from stormpy.task.spout_executor import NEXT_TUPLE_CALLS
from stormpy.task.tree import SharedAcks

log = logging.getLogger(__name__)

#: A step spending this long off the CPU (sleeping, blocked) moves its executor to its own thread.
DETACH_SECS = 0.05
#: A step running this long moves its executor to its own thread (the watchdog's check).
STUCK_SECS = 1.0
_MAX_WAIT_SECS = 0.05
_MAX_QUEUED_FACTOR = 4.0
_MAX_BACKOFF_SECS = 30.0
#: The most a loop multiplies its spouts' ``next_tuple`` calls per step by (``size_spout_shares``).
MAX_SPOUT_SHARE = 4
#: The window within which a worker loop counts an executor's blocked steps (``strikes_to_detach``).
STRIKE_SECS = 10.0
#: A round reuses the previous round's :func:`sched_times` mark while it is younger than this
#: (two system calls a round were 1.2% of a cluster worker's CPU; a mark up to 10 ms older
#: adds that much, mostly CPU time, to the window ``_check_blocked`` judges against 50 ms).
_MARK_SECS = 0.01
#: ``sys.setswitchinterval`` of a worker's loop (``ExecutorLoop.pace_switches``): while it
#: spends at least ``BUSY_BELOW`` of a ``PACE_SECS`` window waiting for work (the transport's
#: threads get the GIL within this when they have a frame), and while it waits less.
IDLE_SWITCH_SECS = 0.001
BUSY_SWITCH_SECS = 0.005
PACE_SECS = 0.1
BUSY_BELOW = 0.1

Running = tuple[Executor[Any], float]   # the executor in step() and when the step started
#: wall clock, on a CPU, waiting for a CPU (the thread), CPU of all the process's threads (seconds)
SchedTimes = tuple[float, float, float, float]


def open_sched_times() -> int:
    """A descriptor on the calling thread's Linux ``schedstat`` for :func:`sched_times`, or -1."""
    try:
        return os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
    except OSError:
        return -1


def sched_times(fd: int) -> SchedTimes | None:
    """(monotonic time, CPU time, run-queue wait) of the thread ``fd`` was opened for (a
    ``pread``: a few microseconds) and the CPU time of the whole process; None where it is
    not available (then only the watchdog guards, by wall-clock time)."""
    if fd < 0:
        return None
    try:
        fields = os.pread(fd, 128, 0).split()
        return time.monotonic(), int(fields[0]) / 1e9, int(fields[1]) / 1e9, time.process_time()
    except (OSError, ValueError, IndexError):
        return None


def blocked_secs(mark: SchedTimes, now: SchedTimes) -> float:
    """Seconds between two :func:`sched_times` the thread spent neither running, nor waiting
    for a CPU, nor (possibly) for the GIL while another thread of the process held it: the
    time it slept or waited on I/O.

    Another thread holds the GIL while it runs and while the OS has it waiting for a CPU; its
    run-queue time is not known here, so it is estimated at this thread's own share (on a
    loaded machine every thread waits about as long per CPU-second; at most
    ``_MAX_QUEUED_FACTOR`` times its CPU time, so that a step sleeping beside busy threads is
    still seen). Other threads' CPU time
    is all subtracted, also what they ran in parallel on another core, so this errs towards
    "not blocked" (the watchdog remains)."""
    wall, own, queued = now[0] - mark[0], now[1] - mark[1], now[2] - mark[2]
    others = max(0.0, (now[3] - mark[3]) - own)
    if own > 0.0:
        others *= min(1.0 + queued / own, _MAX_QUEUED_FACTOR)
    return wall - own - queued - others


def _shares_acks(executor: Executor[Any]) -> bool:
    """A bolt executor (not the acker) whose tuples are tracked: it may settle into ``SharedAcks``."""
    trees = getattr(executor, "trees", None)
    return (getattr(executor, "kind", None) == "bolt" and executor.component_id != ACKER_COMPONENT
            and trees is not None and bool(trees.num_ackers))


def size_spout_shares(executors: Iterable[Executor[Any]], alone: Iterable[Executor[Any]] = ()) -> int:
    """Give the spout executors of one loop a share of each round (``next_tuple`` calls per
    task and step) of ``NEXT_TUPLE_CALLS`` times the mean parallelism of the loop's user bolts
    (at most ``MAX_SPOUT_SHARE`` times); spouts in ``alone`` (leaving the loop) get
    ``NEXT_TUPLE_CALLS`` again. Returns the factor.

    Why: a round steps every executor once, and a bolt executor pays a fixed cost per step and
    per batch (its queue, the driver's setup and settling, its flush). With a fixed share, at
    parallelism 2 each split and count executor got half the batch parallelism 1 gave it, so
    par 2 paid those costs twice per word: the local word count (compiled, five alternating
    pairs) counted 0.96-0.97x par 1's words per CPU-second. With the share doubled each bolt
    executor gets par 1's batch again and par 2 counted 1.01x par 1 (0.99-1.04x), p99 complete
    latency 0.8 -> 1.5 ms; shares of 3 and 4 times counted no more at par 2, and a doubled
    share at par 1 no more either.
    """
    executors = list(executors)
    bolts = [e for e in executors if getattr(e, "kind", None) == "bolt" and not is_system_id(e.component_id)]
    components = {e.component_id for e in bolts}
    factor = min(max(round(len(bolts) / len(components)), 1), MAX_SPOUT_SHARE) if components else 1
    for executor in executors:
        if getattr(executor, "kind", None) == "spout":
            executor.next_tuple_calls = NEXT_TUPLE_CALLS * factor   # type: ignore[attr-defined]
    for executor in alone:
        if getattr(executor, "kind", None) == "spout":
            executor.next_tuple_calls = NEXT_TUPLE_CALLS   # type: ignore[attr-defined]
    return factor


def upstream_first(executors: Iterable[Executor[Any]]) -> list[Executor[Any]]:
    """The executors in the order tuples flow: spouts, then each bolt after the components it
    subscribes to, framework bolts without inputs (the acker) last; ties keep their order.

    Why: a round then carries a spout's tuples through every stage (and the acks to the
    acker) while they are still in the CPU's caches, instead of leaving each stage's output
    for the next round: the local word count's p50 complete latency fell from 2.2-2.9 ms to
    1.0-1.1 ms, at the same or less CPU per word."""
    executors = list(executors)
    depth: dict[str, int] = {}

    def depth_of(component: str, plan: Any, seen: frozenset[str]) -> int:
        known = depth.get(component)
        if known is not None:
            return known
        comp = plan.components.get(component)
        if comp is None:
            return 0
        if not comp.inputs:
            found = 0 if comp.kind == "spout" or not getattr(comp, "is_framework", False) else 1 << 20
        else:
            found = 1 + max((depth_of(src, plan, seen | {component}) for src, _stream in comp.inputs
                             if src not in seen and src != component), default=0)
        depth[component] = found
        return found

    def key(executor: Executor[Any]) -> int:
        plan = getattr(executor, "plan", None)
        if plan is None or not hasattr(plan, "components"):
            return 0
        return depth_of(executor.component_id, plan, frozenset())

    return sorted(executors, key=key)


class ExecutorLoop:
    """Runs several executors on one thread (see the module docstring)."""

    def __init__(self, executors: Iterable[Executor[Any]], pin: Callable[[], None] | None = None,
                 guard: Any = None) -> None:
        # replaced, never changed in place
        self.executors: list[Executor[Any]] = upstream_first(executors)
        self.idle = False
        self.detached: list[str] = []       # executors moved to their own thread, named once it runs
        self._pin = pin
        #: A worker's ThreadGuard (framework errors count toward its budget), or None.
        self.guard = guard
        #: Called on the loop thread at the end of every round, mid-step by ``hand_off`` and when
        #: the loop ends (see the module docstring); None: nothing to hand off.
        self.after_round: Callable[[], None] | None = None
        #: ``threading.get_ident()`` of the thread running the rounds now (0 before it starts).
        self.ident = 0
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._generation = 0                # the loop thread of this generation runs the round
        self._running: Running | None = None
        self._fd = -1                        # the loop thread's schedstat (sched_times)
        self._mark: SchedTimes | None = None  # the loop thread's times at the start of its round
        self._failures: dict[int, int] = {}
        self._resume_at: dict[int, float] = {}
        self._stopped = threading.Event()
        #: Set by a worker's runtime whose threads are not pinned to one core: the loop sets the
        #: interpreter's switch interval by load (see :meth:`_pace`); False leaves it alone
        #: (``stormpy local``, a pinned worker).
        self.pace_switches = False
        self._busy = False              # the switch interval is BUSY_SWITCH_SECS
        #: Slow, blocked steps of one executor within ``STRIKE_SECS`` that move it to a thread
        #: of its own (a worker's runtime sets 2, see ``_check_blocked``).
        self.strikes_to_detach = 1
        self._strikes: dict[int, list[float]] = {}
        self._window = 0.0              # monotonic start of the current pacing window
        self._waited = 0.0              # seconds the loop waited for work in it
        self.thread: threading.Thread | None = None
        self._watchdog_thread: threading.Thread | None = None
        for executor in self.executors:
            executor.waker = self
        #: The bolt executors' combined acks, and the executor before whose step the loop
        #: flushes them (the acker's, where it comes after them); see ``_share_acks``.
        self._acks: SharedAcks | None = None
        self._acks_before: Executor[Any] | None = None
        self._regroup()

    def wake(self) -> None:
        """A batch or control call arrived while the loop waits (any thread)."""
        self._event.set()

    def hand_off(self, executor: Executor[Any]) -> None:
        """Mid-step, on the loop's thread (``Waker.hand_off``): in a worker (``after_round``
        set), the combined acks and the round's batches for other workers leave now, as at the
        end of a round. Without ``after_round`` (``stormpy local``) everything goes to executors
        of this loop, which cannot take it before the step ends: the acks stay combined.

        Only for the step the loop runs now (under the lock the watchdog takes to give up on a
        step): a step it gave up on, still running on the old thread, must not flush the shared
        acks the new loop thread settles into."""
        if self.after_round is None:
            return
        with self._lock:
            running = self._running
            if running is None or running[0] is not executor or self.ident != threading.get_ident():
                return
            if self._acks is not None:
                self._acks.flush()
        self._end_round()

    def start(self) -> None:
        self.thread = self._new_thread(self._main, "executor-loop")
        for executor in self.executors:
            executor.thread = self.thread
        self.thread.start()
        self._watchdog_thread = self._new_thread(self._watchdog, "executor-loop-watchdog")
        self._watchdog_thread.start()

    def join(self, timeout: float) -> bool:
        """After the executors stopped: wait for the watchdog to end (it does once the loop did)."""
        if self._watchdog_thread is None:
            return True
        self._watchdog_thread.join(timeout)
        return not self._watchdog_thread.is_alive()

    def _new_thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        """A daemon thread; under the worker's guard (``self.guard``) when there is one, so that
        whatever ends it (a user's ``sys.exit()`` in a step: ``SystemExit`` is no Exception)
        is reported and ends the worker, as on an executor's own thread, never silently."""
        guard = self.guard
        if guard is None or not hasattr(guard, "run"):
            return threading.Thread(target=target, name=name, daemon=True)
        return threading.Thread(target=guard.run, args=(name, target, False), name=name, daemon=True)

    def _main(self) -> None:
        if self._pin is not None:
            self._pin()
        for executor in list(self.executors):
            if not executor.setup():
                self._retire(executor)
        self._run(0)

    # ------------------------------------------------------------ the loop
    def _run(self, generation: int) -> None:
        """Rounds until every executor stopped (or this thread was left with a blocked one)."""
        self._fd = fd = open_sched_times()
        self.ident = threading.get_ident()
        try:
            while True:
                executors = self.executors
                if not executors:
                    return
                wait = _MAX_WAIT_SECS
                mark = self._mark
                if mark is None or time.monotonic() - mark[0] > _MARK_SECS:
                    self._mark = mark = sched_times(fd)
                slowest: Executor[Any] | None = None
                slowest_secs = 0.0
                acks, acks_before = self._acks, self._acks_before
                for executor in executors:
                    if executor is acks_before:
                        acks.flush()   # type: ignore[union-attr]  # set together
                    started = time.monotonic()
                    took = self._turn(executor, generation, started)
                    if took is None:
                        return      # the watchdog gave the others a new loop thread
                    spent = time.monotonic() - started
                    if spent > slowest_secs:
                        slowest, slowest_secs = executor, spent
                    wait = min(wait, took)
                if acks is not None:
                    acks.flush()
                self._end_round()   # first: an executor moved to its own thread sends after these
                if slowest is not None and slowest_secs > DETACH_SECS:
                    self._check_blocked(slowest, mark)
                if self.pace_switches and started - self._window >= PACE_SECS:
                    self._pace(started)
                if wait > 0.0:
                    if self.pace_switches:
                        waited = time.monotonic()
                        self._wait_idle(wait)
                        self._waited += time.monotonic() - waited
                    else:
                        self._wait_idle(wait)
                    self._mark = None   # time spent waiting here is not a step's: a new mark
        finally:
            if generation == self._generation and self._acks is not None:
                self._acks.flush()
            self._end_round()
            if self.ident == threading.get_ident():
                self.ident = 0      # a later thread may be given the same id
            if generation == self._generation:
                self._stopped.set()
            if fd >= 0:
                os.close(fd)

    def _end_round(self) -> None:
        after = self.after_round
        if after is None:
            return
        try:
            after()
        except Exception:  # noqa: BLE001 - the hand-off logs its own failures; never end the loop
            log.exception("executor loop: handing off a round's output failed")

    def _turn(self, executor: Executor[Any], generation: int, started: float) -> float | None:
        """One executor's step; its wait, or None when this thread now belongs to it."""
        if executor.stopping:
            self._retire(executor)
            return 0.0
        key = id(executor)
        if self._resume_at and started < self._resume_at.get(key, 0.0):
            return _MAX_WAIT_SECS
        self._running = (executor, started)
        try:
            wait = executor.step()
        except Exception as exc:
            wait = self._loop_error(executor, exc)
        except BaseException:
            raise
        except:  # noqa: E722 - no exception at all (see not_an_exception)
            wait = self._loop_error(executor, not_an_exception())
        with self._lock:
            moved = generation != self._generation
            if not moved:   # a handed-off step returning late must not clear the new loop's marker
                self._running = None
        if moved:
            executor.run_on_own_thread()
            return None
        return wait

    def _check_blocked(self, executor: Executor[Any], mark: SchedTimes | None) -> None:
        """A slow round: when this thread spent over ``DETACH_SECS`` of it neither running nor
        waiting for a CPU (so sleeping or blocked in user code), its slowest step's executor
        moves to a thread of its own. Time the OS gave to other processes, or other threads
        of this one, does not count (:func:`blocked_secs`)."""
        now = sched_times(self._fd)
        if mark is None or now is None:
            return
        blocked = blocked_secs(mark, now)
        if blocked <= DETACH_SECS:
            return
        if self.strikes_to_detach > 1:
            # A worker: one such step may be a hiccup of a loaded machine (the GIL holder, a
            # transport thread, preempted by other processes); a second within STRIKE_SECS is not.
            key = id(executor)
            strikes = [t for t in self._strikes.get(key, ()) if now[0] - t < STRIKE_SECS] + [now[0]]
            self._strikes[key] = strikes
            if len(strikes) < self.strikes_to_detach:
                log.info("executor %s: a step spent %.0f ms sleeping or blocked (%d of %d before it "
                         "moves to a thread of its own)", executor.name, blocked * 1000,
                         len(strikes), self.strikes_to_detach)
                return
        self._detach(executor, f"it spent {blocked * 1000:.0f} ms of a step sleeping or blocked")

    def _regroup(self, leaving: Executor[Any] | None = None, stuck: bool = False) -> None:
        """The loop's executors (``self.executors``) changed, ``leaving`` (if any) no longer among
        them: the shared acks and the spouts' shares of a round follow (``stuck``: ``leaving``'s
        step still runs on the old thread, see ``_share_acks``)."""
        self._share_acks(stuck=leaving if stuck else None)
        size_spout_shares(self.executors, alone=[leaving] if leaving is not None else ())

    def _share_acks(self, stuck: Executor[Any] | None = None) -> None:
        """The bolt executors of the loop (``self.executors``) settle into one dict; one that
        left settles into its own again.

        Called where the loop's executors change: on the loop thread between steps (the shared
        acks are flushed first, so the one leaving takes none of the others' along), or by the
        watchdog while ``stuck``'s step runs on the old thread: a sharer may be writing to the
        dict, so it keeps it (and flushes it itself, when its step returns: what the others had
        settled into it in that round goes then, or times out and is replayed if it never
        returns), and the others get a new one; a stuck executor that does not share (a spout)
        leaves the dict to the others, whose new loop thread flushes it.
        """
        old = self._acks
        if old is not None and stuck is None:
            old.flush()
        sharers = [e for e in self.executors if _shares_acks(e)]
        if old is not None:
            for trees in old.members:
                if not any(e.trees is trees for e in sharers):
                    trees.unshare(keep=stuck is not None and trees is getattr(stuck, "trees", None))
        if len(sharers) < 2 or any(e.trees.acker_tasks != sharers[0].trees.acker_tasks for e in sharers):
            for e in sharers:
                e.trees.unshare()
            self._acks, self._acks_before = None, None
            return
        stuck_shares = old is not None and stuck is not None and any(
            trees is getattr(stuck, "trees", None) for trees in old.members)
        acks = old if old is not None and not stuck_shares else SharedAcks(
            sharers[0].trees.acker_tasks, sharers[0].trees.src_task, sharers[0].runtime.transfer.send)
        for e in sharers:
            if e.trees.shared is not acks:
                e.trees.share(acks)
        acks.members = [e.trees for e in sharers]
        last = self.executors.index(sharers[-1])
        self._acks_before = next((e for e in self.executors[last + 1:] if e.component_id == ACKER_COMPONENT), None)
        self._acks = acks

    def _pace(self, now: float) -> None:
        """The switch interval by load, once a ``PACE_SECS`` window is over (a cluster worker: the
        loop plus the transport's send and receive threads). A loop that hardly ever waits holds
        the GIL until the interpreter forces a switch: with 1 ms the transport threads take it
        every millisecond, and every hand-off costs a thread wake-up and cold caches (measured
        on the cluster word count at the maximum rate, fixed intervals, alternating runs:
        192-221k counted words per worker CPU-second with 1 ms, 241-257k with 5 ms). A loop
        that waits often (half the rate) hands the GIL over as it waits, and 1 ms bounds how
        long a frame waits for it otherwise (p99 complete latency at half the rate 30 ms with
        1 ms, 49 ms with 5 ms). So 5 ms while the loop waited less than ``BUSY_BELOW`` of the
        last window, else 1 ms. Those figures are of threads the OS spreads over the cores; a
        worker that pins its threads to one core (``runtime.slot_cpu``) does not pace and keeps
        1 ms (see ``WorkerRuntime.start``)."""
        busy = self._waited < BUSY_BELOW * (now - self._window)
        self._window, self._waited = now, 0.0
        if busy != self._busy:
            self._busy = busy
            sys.setswitchinterval(BUSY_SWITCH_SECS if busy else IDLE_SWITCH_SECS)

    def _wait_idle(self, wait: float) -> None:
        """Nothing to do: wait for ``wait`` seconds or until another thread hands over work."""
        self._event.clear()
        self.idle = True
        try:
            if all(executor.queue.empty() for executor in self.executors):
                self._event.wait(wait)
        finally:
            self.idle = False

    def _retire(self, executor: Executor[Any]) -> None:
        """A stopped executor (or one that died starting) shuts down on this thread."""
        with self._lock:
            self.executors = [e for e in self.executors if e is not executor]
        self._regroup()
        executor.waker = None
        try:
            executor._shutdown()
        except Exception:
            log.exception("executor %s: shutdown failed", executor.name)

    def _loop_error(self, executor: Executor[Any], exc: Exception) -> float:
        """Framework code raised in a step: as on an executor's own thread, report it for every
        task, re-create the tasks, and skip the executor for the restart backoff."""
        key = id(executor)
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        executor.loop_restarts += 1
        log.exception("executor %s: framework error in its loop (restart #%d)", executor.name, failures)
        for task in list(executor.tasks.values()):
            executor._framework_error(task, exc, "executor loop")
        guard = self.guard if self.guard is not None else getattr(executor.runtime, "thread_guard", None)
        if guard is not None and not guard.failed(f"executor-{executor.name}", exc, handled="loop restarted"):
            for other in self.executors:   # the worker gives up on its threads (it exits)
                other.stop("the worker gave up on its threads")
            return 0.0
        backoff = min(executor.settings.restart_backoff_secs * (2 ** min(failures, 8)), _MAX_BACKOFF_SECS)
        self._resume_at[key] = time.monotonic() + backoff
        return 0.0

    # ------------------------------------------------------------ blocking user code
    def _detach(self, executor: Executor[Any], why: str) -> None:
        """Called on the loop thread between steps: the executor continues on its own thread."""
        with self._lock:
            if executor not in self.executors:
                return
            self.executors = [e for e in self.executors if e is not executor]
        self._regroup(leaving=executor)
        self._hand_over(executor, why)
        executor.waker = None
        thread = self._new_thread(self._own_thread(executor), f"executor-{executor.name}")
        executor.thread = thread
        thread.start()
        self.detached.append(executor.name)   # named once its thread is in place

    def _own_thread(self, executor: Executor[Any]) -> Callable[[], None]:
        def main() -> None:
            if self._pin is not None:
                self._pin()
            executor.run_on_own_thread()
        return main

    def _hand_over(self, executor: Executor[Any], why: str) -> None:
        log.warning("executor %s moves to a thread of its own (%s): user code that blocks would "
                    "hold up the other executors of this process", executor.name, why)

    def _watchdog(self) -> None:
        """Twice a second: a step that has run for ``STUCK_SECS`` (not counting time the OS gave
        other processes) keeps its thread; the others continue on a new loop thread."""
        while not self._stopped.wait(STUCK_SECS / 2):
            with self._lock:
                executor = self._stuck()
                if executor is None:
                    continue
                self._generation += 1
                generation = self._generation
                self.executors = [e for e in self.executors if e is not executor]
                self._regroup(leaving=executor, stuck=True)
                self._hand_over(executor, f"a step has not returned for {STUCK_SECS:g} s")
                executor.waker = None
                self._running = None
            thread = self._new_thread(self._continue(generation), "executor-loop")
            self.thread = thread
            for other in self.executors:
                other.thread = thread
            thread.start()
            self.detached.append(executor.name)   # named once the others' new thread is in place

    def _stuck(self) -> Executor[Any] | None:
        running, mark = self._running, self._mark
        if running is None or time.monotonic() - running[1] < STUCK_SECS:
            return None
        now = sched_times(self._fd)
        if mark is not None and now is not None and (now[0] - mark[0]) - (now[2] - mark[2]) < STUCK_SECS:
            return None     # mostly waiting for a CPU: a loaded machine, not a stuck step
        return running[0]

    def _continue(self, generation: int) -> Callable[[], None]:
        def main() -> None:
            if self._pin is not None:
                self._pin()
            try:
                self._run(generation)
            except Exception as exc:  # noqa: BLE001 - never silent
                log.error("executor loop failed: %s", "".join(traceback.format_exception(exc)))
                if self.guard is not None:
                    raise   # a worker's guard ends the worker, as the first loop thread's would
        return main
