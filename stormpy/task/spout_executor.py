"""Spout executors: call ``next_tuple`` while active, track pending tuple trees, run ack/fail.

A spout emit with ``tup_id`` starts a tuple tree: a random 64-bit root id, a random edge id
per receiving task, and an ``__ack_init(root, xor of edges, spout task)`` message to the
acker task ``acker_tasks[root % n]``. The pending map (root -> tup_id, start time, stream) is
a RotatingMap, so the spout times its own trees out (``topology.message.timeout.secs``) even
when an acker never heard of them, as Storm does. With ``topology.acker.executors: 0`` (or no
subscribers) a tracked emit is acked as soon as ``next_tuple`` returns.

``next_tuple`` is called only while the topology is active, the task has fewer than
``topology.max.spout.pending`` trees in flight, and no receiver in the runtime (or a remote
worker, through ``set_remote_backpressure``) is over its high watermark.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from queue import Empty
from typing import Any

from stormpy.acker.ledger import RotatingMap
from stormpy.serialization import SCALARS
from stormpy.task.bolt_executor import _FAST_TYPES, check_emit, debug_emit, direct_targets
from stormpy.task.executor import ACK_ACK, ACK_FAIL, ACK_INIT, Executor, TaskBase

log = logging.getLogger(__name__)

_getrandbits = random.getrandbits
_NEXT_TUPLE_ROUNDS = 64
_TIMEOUT_BUCKETS = 3


def make_spout_emit(task: "SpoutTask") -> Any:
    """The spout's ``emit``: a closure with a short path for default-stream emits of scalars."""
    general = task.emit_general
    route = task.routes.get("default")
    if task.executor.conf.get("topology.debug"):
        return debug_emit(task, general)
    if route is None or route.direct:
        return general
    ex = task.executor
    select = route.select
    nfields = route.num_fields
    outbox = ex.outbox
    batch_size = ex.batch_size
    send_full = ex.send_full
    check = ex.serialization.check_value
    counter = ex.stats.stream_counter("default")
    tid = task.task_id
    ackers = ex.acker_tasks
    num_ackers = ex.num_ackers
    pending_put = task.pending.put
    ack_now = task.ack_now
    fast_types = _FAST_TYPES
    getrandbits = _getrandbits
    monotonic = time.monotonic

    def emit(values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        if (stream is not None or direct_task is not None or need_task_ids
                or type(values) is not list or len(values) != nfields):
            return general(values, tup_id, stream, anchors, direct_task, need_task_ids)
        for value in values:
            if type(value) not in fast_types:
                check(value)
        targets = select(values)
        if tup_id is not None and num_ackers and targets:
            root = getrandbits(64)
            val = 0
            for target in targets:
                edge = getrandbits(64)
                val ^= edge
                box = outbox[target]
                box.append(("default", tid, values, {root: edge}))
                if len(box) >= batch_size:
                    send_full(target)
            pending_put(root, [tup_id, monotonic(), "default"])
            dest = ackers[root % num_ackers]
            box = outbox[dest]
            box.append((ACK_INIT, tid, [root, val, tid], None))
            if len(box) >= batch_size:
                send_full(dest)
        else:
            message = ("default", tid, values, None)
            for target in targets:
                box = outbox[target]
                box.append(message)
                if len(box) >= batch_size:
                    send_full(target)
            if tup_id is not None:
                ack_now.append((tup_id, "default"))
        task.emit_count += 1
        counter[0] += 1
        counter[1] += len(targets)
        return None

    return emit


class SpoutTask(TaskBase):
    """One spout task: its emits start tuple trees; acker answers finish them."""

    def __init__(self, executor: "SpoutExecutor", task_id: int) -> None:
        super().__init__(executor, task_id)
        self.pending: RotatingMap[int, list[Any]] = RotatingMap(_TIMEOUT_BUCKETS)
        self.pending_values = self.pending._values  # len() of it on the hot path
        self.ack_now: list[tuple[Any, str]] = []
        self.emit_count = 0
        self.next_tuple: Any = None
        self.emit = make_spout_emit(self)

    def emit_general(self, values: Sequence[Any], tup_id: Any = None, stream: str | None = None,
                     anchors: Any = None, direct_task: int | None = None,
                     need_task_ids: bool = False) -> list[int] | None:
        """Every kind of spout emit: any stream, direct tasks, task ids wanted."""
        if stream is None:
            stream = "default"
        route = self.routes.get(stream)
        if route is None or len(values) != route.num_fields or type(values) is not list:
            check_emit(self, route, stream, values)
            values = list(values)
        else:
            for value in values:
                if type(value) not in SCALARS or type(value) is int:
                    self.executor.serialization.check_value(value)
        if direct_task is not None or route.direct:
            targets = direct_targets(self, route, stream, direct_task)
        else:
            targets = route.select(values)
        ex = self.executor
        outbox = ex.outbox
        batch_size = ex.batch_size
        tid = self.task_id
        if tup_id is not None and ex.num_ackers and targets:
            root = _getrandbits(64)
            val = 0
            for target in targets:
                edge = _getrandbits(64)
                val ^= edge
                box = outbox[target]
                box.append((stream, tid, values, {root: edge}))
                if len(box) >= batch_size:
                    ex.send_full(target)
            self.pending.put(root, [tup_id, time.monotonic(), stream])
            dest = ex.acker_tasks[root % ex.num_ackers]
            box = outbox[dest]
            box.append((ACK_INIT, tid, [root, val, tid], None))
            if len(box) >= batch_size:
                ex.send_full(dest)
        else:
            message = (stream, tid, values, None)
            for target in targets:
                box = outbox[target]
                box.append(message)
                if len(box) >= batch_size:
                    ex.send_full(target)
            if tup_id is not None:
                self.ack_now.append((tup_id, stream))
        self.emit_count += 1
        counter = ex.stats.stream_counter(stream)
        counter[0] += 1
        counter[1] += len(targets)
        return list(targets) if need_task_ids else None

    def on_crash(self) -> None:
        """The instance that knew these tup_ids is gone: its trees are dropped, not failed.

        A replaying spout re-reads its source after the restart; calling ``fail`` with ids
        the new instance never emitted would only crash it again.
        """
        self.pending.clear()
        self.ack_now.clear()


class SpoutExecutor(Executor):
    """Runs spout tasks: the next_tuple loop, acker answers and timeouts."""

    kind = "spout"
    task_class = SpoutTask

    def __init__(self, runtime: Any, start: int, end: int) -> None:
        super().__init__(runtime, start, end)
        self.active = False
        max_pending = self.conf.get("topology.max.spout.pending")
        self.max_pending = int(max_pending) if max_pending else 0
        self.sleep_secs = max(0.0001, float(self.conf.get("topology.sleep.spout.wait.strategy.time.ms") or 1) / 1000.0)
        self.timeout_secs = float(self.conf.get("topology.message.timeout.secs") or 30)
        self.timeouts_enabled = bool(self.conf.get("topology.enable.message.timeouts", True))
        self._emitted_last_round = 0

    def pending_count(self) -> int:
        return sum(len(t.pending_values) for t in list(self.tasks.values()))

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
        if self.timeouts_enabled and self.num_ackers:
            self.add_timer(self.timeout_secs / (_TIMEOUT_BUCKETS - 1), self._expire, "timeouts")
        elif self.num_ackers:
            # Never rotated, so the generation lists would only grow: prune them now and then.
            self.add_timer(30.0, self._compact_pending, "compact-pending")

    # ------------------------------------------------------------ acker answers
    def _on_messages(self, task: SpoutTask, messages: list[Any]) -> None:
        """Acker answers: one loop per batch with lookups hoisted (a batch holds ~1000)."""
        pop = task.pending_values.pop  # RotatingMap.pop is this dict's pop
        stats = self.stats
        acked = stats.acked
        complete = stats.complete_ms
        monotonic = time.monotonic
        for message in messages:
            stream = message[0]
            if stream == ACK_ACK:
                entry = pop(message[2][0], None)
                if entry is None:
                    continue
                tup_id, started, out_stream = entry
                acked[out_stream] += 1
                ms = (monotonic() - started) * 1000.0
                latency = complete.get(out_stream)
                if latency is None:
                    complete[out_stream] = [ms, 1]
                else:
                    latency[0] += ms
                    latency[1] += 1
                component = task.component
                if component is None:
                    continue
                try:
                    component.ack(tup_id)
                except Exception as exc:
                    self._crash(task, exc, "ack")
            elif stream == ACK_FAIL:
                entry = pop(message[2][0], None)
                if entry is not None:
                    self._failed(task, entry)
            else:
                log.warning("spout %s task %d: message on stream %r from task %r dropped",
                            self.component_id, task.task_id, stream, message[1])

    def _acked(self, task: SpoutTask, entry: list[Any]) -> None:
        tup_id, started, stream = entry
        stats = self.stats
        stats.acked[stream] += 1
        stats.add_latency(stats.complete_ms, stream, (time.monotonic() - started) * 1000.0)
        if task.component is None:
            return
        try:
            task.component.ack(tup_id)
        except Exception as exc:
            self._crash(task, exc, "ack")

    def _failed(self, task: SpoutTask, entry: list[Any]) -> None:
        tup_id, _started, stream = entry
        self.stats.failed[stream] += 1
        if task.component is None:
            return
        try:
            task.component.fail(tup_id)
        except Exception as exc:
            self._crash(task, exc, "fail")

    def _expire(self) -> None:
        for task in self.tasks.values():
            expired = task.pending.rotate()
            if expired:
                log.debug("spout %s task %d: %d tuple trees timed out", self.component_id, task.task_id, len(expired))
            for _root, entry in expired:
                self._failed(task, entry)

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
        max_pending = self.max_pending
        for task in self.tasks.values():
            if task.component is None:
                continue
            pending = task.pending_values
            next_tuple = task.next_tuple
            for _ in range(_NEXT_TUPLE_ROUNDS):
                if max_pending and len(pending) >= max_pending:
                    break
                before = task.emit_count
                try:
                    next_tuple()
                except Exception as exc:
                    self._crash(task, exc, "next_tuple")
                    break
                if task.ack_now:
                    self._ack_now(task)
                if task.emit_count == before:
                    break
                emitted += task.emit_count - before
                if task.component is None:
                    break
        return emitted

    def _loop(self) -> None:
        queue = self.queue
        stop = self._stop
        runtime = self.runtime
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
            if self.active and not runtime.is_overloaded():
                emitted = self._next_tuples()
            now = time.monotonic()
            if self.outbox and (not emitted or now - self._last_flush >= self.flush_secs):
                self.flush()
            if not emitted:
                # Idle, throttled or inactive: sleep, but wake at once for acker answers.
                timeout = self.sleep_secs if self.active else min(0.05, max(next_timer - now, 0.001))
                try:
                    item = queue.get(timeout=timeout)
                except Empty:
                    continue
                self._take(item)
