"""Spout executors: call ``next_tuple`` while active, track pending tuple trees, run ack/fail.

A spout emit with ``tup_id`` starts a tuple tree (``stormpy.task.tree``): a random 64-bit
root id, a random edge id per receiving task, and an ``__ack_init(root, xor of edges, spout
task)`` message to the acker task ``acker_tasks[root % n]``. The pending map (root -> tup_id, start time, stream) is
a RotatingMap, so the spout times its own trees out (``topology.message.timeout.secs``) even
when an acker never heard of them, as Storm does. With ``topology.acker.executors: 0`` (or no
subscribers) a tracked emit is acked as soon as ``next_tuple`` returns.

``next_tuple`` is called only while the topology is active, the task has fewer than
``topology.max.spout.pending`` trees in flight, and no receiver in the runtime (or a remote
worker, through ``set_remote_backpressure``) is over its high watermark.

When ``topology.max.spout.pending`` is unset (Storm: unbounded) and trees are tracked, the cap
adapts instead (``_adapt``, once a second): it starts at 256, halves when trees time out,
shrinks while the average complete latency is above half the message timeout, and grows (x2
below a tenth of the timeout, else x1.5) only while the spout is held by the cap, latency is
below a quarter of the timeout, and the
acked rate times that quarter (Little's law: the in-flight count that keeps latency there)
allows it. A slow bolt then gets a queue it can work through before tuples time out, instead
of a queue of tuples that can only time out and replay (throughput falling to zero). The cap
and the time spent throttled are the executor metrics ``max_spout_pending`` and
``throttled_ms``.
"""
from __future__ import annotations

import logging
import time
from queue import Empty
from typing import TYPE_CHECKING, Any

from stormpy.rotating_map import RotatingMap
from stormpy.streams import ACK_ACK, ACK_FAIL
from stormpy.task.emit import make_emit
from stormpy.task.executor import Executor, TaskBase, not_an_exception
from stormpy.task.tree import fast_spout_emit, spout_place

if TYPE_CHECKING:
    from stormpy.api.contract import SpoutOutputCollector
    from stormpy.task.runtime import WorkerRuntime

    def _implements_the_contract(task: SpoutTask) -> SpoutOutputCollector:
        return task   # mypy checks that a SpoutTask is what the component contract says

log = logging.getLogger(__name__)

#: ``next_tuple`` calls, and tuples they emit, per spout task and step at most
#: (``SpoutExecutor.next_tuple_calls``; an ``ExecutorLoop`` multiplies it by its bolts'
#: parallelism, see ``size_spout_shares``). A call is never cut short: one emitting more than
#: what is left of the share ends the task's step after it.
NEXT_TUPLE_CALLS = 64
_TIMEOUT_BUCKETS = 3
_ADAPTIVE_START = 256
_ADAPTIVE_MIN = 8
_ADAPTIVE_MAX = 50000
_ADAPT_SECS = 1.0


class SpoutTask(TaskBase):
    """One spout task: its emits start tuple trees; acker answers finish them."""

    def __init__(self, executor: "SpoutExecutor", task_id: int) -> None:
        super().__init__(executor, task_id)
        self.executor: SpoutExecutor = executor
        self.pending: RotatingMap[int, list[Any]] = RotatingMap(_TIMEOUT_BUCKETS)
        #: the pending map's newest generation, where acker answers find their trees (pop of
        #: it on the hot path, the map's own pop on a miss); replaced when the map rotates
        self.pending_live = self.pending.newest()
        self.ack_now: list[tuple[Any, str]] = []
        self.emit_count = 0
        self.next_tuple: Any = None      # the component's next_tuple, set by _bind
        self.emit = make_emit(self, spout_place(self), fast_spout_emit, starts_trees=True)

    def pending_count(self) -> int:
        """Tuple trees of this task in flight (Storm's ``getPendingCount``)."""
        return len(self.pending)

    def on_crash(self) -> None:
        """The instance that knew these tup_ids is gone: its trees are dropped, not failed.

        A replaying spout re-reads its source after the restart; calling ``fail`` with ids
        the new instance never emitted would only crash it again.
        """
        self.pending.clear()
        self.ack_now.clear()


class SpoutExecutor(Executor[SpoutTask]):
    """Runs spout tasks: the next_tuple loop, acker answers and timeouts."""

    kind = "spout"
    task_class = SpoutTask

    def __init__(self, runtime: WorkerRuntime, start: int, end: int) -> None:
        super().__init__(runtime, start, end)
        self.active = False
        settings = self.settings
        self.adaptive = (settings.max_spout_pending == 0 and self.num_ackers > 0
                         and settings.message_timeouts_enabled)
        #: trees in flight per task before next_tuple is held back; 0: unbounded
        self.pending_cap = _ADAPTIVE_START if self.adaptive else settings.max_spout_pending
        self._capped = False          # the cap held a task back since the last _adapt
        self._capped_round = False    # ... in this round of the loop
        #: ``next_tuple`` calls per task and step (or turn of ``_loop``) at most; set by the
        #: ExecutorLoop that steps this executor (``scheduler.size_spout_shares``).
        self.next_tuple_calls = NEXT_TUPLE_CALLS
        self._expired = 0             # trees timed out since the last _adapt
        self._acks = 0
        self._latency_sum = 0.0       # seconds, acks since the last _adapt
        self._throttled_since = 0.0   # step(): when the spout was first held back, 0: it is not
        self.flow: dict[str, float] = {"throttled_ms": 0.0, "max_spout_pending": float(self.pending_cap)}
        self.stats.metric_sources.append(self.flow)

    def pending_count(self) -> int:
        return sum(len(t.pending) for t in list(self.tasks.values()))

    def in_flight(self) -> int:
        return super().in_flight() + self.pending_count()

    # ------------------------------------------------------------ control
    def set_active(self, active: bool) -> None:
        """Queue an activate/deactivate; it runs on the executor thread."""
        self.call_soon(lambda: self._set_active(active))

    def _set_active(self, active: bool) -> None:
        if active == self.active:
            return
        self.active = active
        for task in self.tasks.values():
            if task.component is None:
                continue
            try:
                task.component.activate() if active else task.component.deactivate()
            except Exception as exc:
                self._crash(task, exc, "activate" if active else "deactivate")

    def _bind(self, task: SpoutTask) -> None:
        task.next_tuple = task.component.next_tuple

    def _after_restart(self, task: SpoutTask) -> None:
        if self.active:
            try:
                task.component.activate()
            except Exception as exc:
                self._crash(task, exc, "activate")

    def _setup_timers(self, now: float) -> None:
        if self.adaptive:
            self.add_timer(_ADAPT_SECS, self._adapt, "adapt-pending")
        if self.settings.message_timeouts_enabled and self.num_ackers:
            self.add_timer(self.settings.message_timeout_secs / (_TIMEOUT_BUCKETS - 1), self._expire, "timeouts")
        elif self.num_ackers:
            # Never rotated, so the generation lists would only grow: prune them now and then.
            self.add_timer(30.0, self._compact_pending, "compact-pending")

    # ------------------------------------------------------------ acker answers
    def _on_messages(self, task: SpoutTask, messages: list[Any]) -> None:
        """Acker answers: ``__ack_ack`` lists every root of the acker's batch that completed."""
        for message in messages:
            stream = message[0]
            if stream == ACK_ACK:
                self._on_completed(task, message[2])
            elif stream == ACK_FAIL:
                entry = task.pending.pop(message[2][0], None)
                if entry is not None:
                    self._failed(task, entry)
            else:
                log.warning("spout %s task %d: message on stream %r from task %r dropped",
                            self.component_id, task.task_id, stream, message[1])

    def _on_completed(self, task: SpoutTask, roots: list[int]) -> None:
        """The spout's ``ack`` for each completed tree it still has; the acked count and the
        complete latency are added once per run of one output stream (a batch holds ~1000
        roots, nearly always of one stream), not per tree."""
        pop = task.pending_live.pop  # the newest generation: a call layer less than the map's
        pop_any = task.pending.pop   # a miss: the older generations (or an unknown root)
        component = task.component
        ack = component.ack if component is not None else None
        now = time.monotonic()
        run_stream: Any = None
        run = 0
        run_secs = 0.0
        for root in roots:
            entry = pop(root, None)
            if entry is None:
                entry = pop_any(root, None)
                if entry is None:
                    continue
            tup_id, started, out_stream = entry
            if out_stream != run_stream:
                self._count_acked(run_stream, run, run_secs)
                run_stream, run, run_secs = out_stream, 0, 0.0
            run += 1
            run_secs += now - started
            if ack is None:
                continue
            try:
                ack(tup_id)
            except Exception as exc:
                self._crash(task, exc, "ack")
                component = task.component   # None now: the re-created instance gets no old acks
                ack = component.ack if component is not None else None
        self._count_acked(run_stream, run, run_secs)

    def _count_acked(self, stream: Any, n: int, secs: float) -> None:
        if n:
            stats = self.stats
            stats.acked[stream] += n
            stats.add_latency(stats.complete_ms, stream, secs * 1000.0, n)
            self._acks += n
            self._latency_sum += secs

    def _acked(self, task: SpoutTask, entry: list[Any]) -> None:
        tup_id, started, stream = entry
        stats = self.stats
        stats.acked[stream] += 1
        stats.add_latency(stats.complete_ms, stream, (time.monotonic() - started) * 1000.0)
        self._tell(task, "ack", tup_id)

    def _failed(self, task: SpoutTask, entry: list[Any]) -> None:
        tup_id, _started, stream = entry
        self.stats.failed[stream] += 1
        self._tell(task, "fail", tup_id)

    def _tell(self, task: SpoutTask, hook: str, tup_id: Any) -> None:
        """Call the spout's ``ack`` or ``fail``; user code that raises crashes the task."""
        component = task.component
        if component is None:
            return
        try:
            (component.ack if hook == "ack" else component.fail)(tup_id)
        except Exception as exc:
            self._crash(task, exc, hook)

    def _expire(self) -> None:
        for task in self.tasks.values():
            expired = task.pending.rotate()
            task.pending_live = task.pending.newest()
            self._expired += len(expired)
            if expired:
                log.debug("spout %s task %d: %d tuple trees timed out", self.component_id, task.task_id, len(expired))
            for _root, entry in expired:
                self._failed(task, entry)

    def _adapt(self) -> None:
        """Adjust the adaptive pending cap from the last second's acks and timeouts."""
        timeout = self.settings.message_timeout_secs
        cap = self.pending_cap
        avg = self._latency_sum / self._acks if self._acks else None
        if self._expired:
            cap = cap // 2
        elif avg is not None and avg > timeout * 0.5:
            cap = int(cap * 0.75)
        elif self._capped and avg is not None and avg < timeout * 0.25:
            rate = self._acks / _ADAPT_SECS / max(1, len(self.tasks))
            factor = 2.0 if avg < timeout * 0.1 else 1.5
            cap = max(cap, min(int(cap * factor) + 1, int(rate * timeout * 0.25)))
        cap = min(max(cap, _ADAPTIVE_MIN), _ADAPTIVE_MAX)
        if cap != self.pending_cap:
            log.debug("spout %s: pending cap %d -> %d (avg complete latency %s s, %d timed out)",
                      self.name, self.pending_cap, cap, None if avg is None else round(avg, 3), self._expired)
        self.pending_cap = cap
        self.flow["max_spout_pending"] = float(cap)
        self._capped = False
        self._expired = self._acks = 0
        self._latency_sum = 0.0

    def _compact_pending(self) -> None:
        for task in self.tasks.values():
            task.pending.compact()

    def _ack_now(self, task: SpoutTask) -> None:
        done = list(task.ack_now)
        task.ack_now.clear()  # the same list: the emit closure holds it
        now = time.monotonic()
        for tup_id, stream in done:
            self._acked(task, [tup_id, now, stream])

    # ------------------------------------------------------------ loop
    def _next_tuples(self) -> int:
        emitted = 0
        max_pending = self.pending_cap
        for task in self.tasks.values():
            if task.component is None:
                continue
            pending = task.pending
            next_tuple = task.next_tuple
            # An emit starts at most one tree and nothing settles during next_tuple, so the
            # room left shrinks by at most the emits; the count is taken again only when that
            # bound says the cap is reached (len() of a RotatingMap is a Python call).
            room = max_pending - len(pending)
            # The share bounds the calls and the tuples they emit: a call emitting many (a
            # polled batch, a rate limiter catching up after a slow round) must not start a
            # share's worth of calls times that in one step, for a round's length -- what every
            # hop of a tree waits -- grows with what the step put in it.
            budget = self.next_tuple_calls
            while budget > 0:
                if max_pending and room <= 0:
                    room = max_pending - len(pending)
                    if room <= 0:
                        self._capped = self._capped_round = True
                        break
                before = task.emit_count
                try:
                    next_tuple()
                except Exception as exc:
                    self._crash(task, exc, "next_tuple")
                    break
                except BaseException:
                    raise
                except:  # noqa: E722 - no exception at all (see not_an_exception)
                    self._crash(task, not_an_exception(), "next_tuple")
                    break
                if task.ack_now:
                    self._ack_now(task)
                n = task.emit_count - before
                if not n:
                    break
                emitted += n
                room -= n
                budget -= n
                if task.component is None:
                    break
        return emitted

    def _loop(self) -> None:
        queue = self.queue
        stop = self._stop
        runtime = self.runtime
        outbox = self.outbox
        flush_secs = self.settings.flush_interval_secs
        sleep_secs = self.settings.spout_wait_secs
        next_timer = 0.0
        while not stop.is_set():
            for _ in range(256):
                try:
                    item = queue.get_nowait()
                except Empty:
                    break
                self._take(item)
            now = time.monotonic()
            if now >= next_timer:
                next_timer = now + min(self._run_timers(now), 0.05)
            emitted = 0
            self._capped_round = False
            overloaded = self.active and runtime.is_overloaded()
            if self.active and not overloaded:
                emitted = self._next_tuples()
            throttled = overloaded or self._capped_round
            now = time.monotonic()
            if outbox and (not emitted or now - self._last_flush >= flush_secs):
                self.flush()
            if not emitted:
                # Idle, throttled or inactive: sleep, but wake at once for acker answers.
                timeout = sleep_secs if self.active else min(0.05, max(next_timer - now, 0.001))
                waited: tuple[int | None, Any] | None
                try:
                    waited = queue.get(timeout=timeout)
                except Empty:
                    waited = None
                if throttled:
                    self.flow["throttled_ms"] += (time.monotonic() - now) * 1000.0
                if waited is not None:
                    self._take(waited)

    def step(self) -> float:
        """One round for a scheduler: acker answers, due timers, up to ``next_tuple_calls``
        ``next_tuple`` calls per task, ending once they emitted as many tuples (unless inactive,
        capped or under backpressure), a flush."""
        queue = self.queue
        for _ in range(256):
            if queue.empty():
                break
            self._take(queue.get_nowait())   # one consumer: not empty means get succeeds
        now = time.monotonic()
        if now >= self.next_timer:
            self.next_timer = now + min(self._run_timers(now), 0.05)
        self._capped_round = False
        overloaded = self.active and self.runtime.is_overloaded()
        emitted = self._next_tuples() if self.active and not overloaded else 0
        if overloaded or self._capped_round:
            if not self._throttled_since:
                self._throttled_since = now
        elif self._throttled_since:
            self.flow["throttled_ms"] += (now - self._throttled_since) * 1000.0
            self._throttled_since = 0.0
        if self.outbox:
            self.flush()
        if emitted:
            return 0.0
        return self.settings.spout_wait_secs if self.active else max(self.next_timer - time.monotonic(), 0.001)
