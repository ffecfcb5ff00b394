"""Bolt executors: receive batches, build Tuples, call ``process``, anchor, ack and emit.

The per-tuple path is the loop in :meth:`BoltExecutor._on_messages` and
:meth:`BoltTask.emit`: no locks, no per-tuple queue operations, one Tuple object and one
message tuple per tuple. Acks are XOR-combined per root id in ``pending_acks`` and become
``__ack_ack`` messages when the outbox is flushed (XOR is associative, so the acker reaches
the same value). A bolt that defines ``process_messages`` (the acker) gets the raw batches.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from queue import Empty
from typing import Any

from stormpy.serialization import SCALARS, SerializationError
from stormpy.task.executor import ACK_ACK, ACK_FAIL, SYSTEM_COMPONENT, TICK, Executor, TaskBase
from stormpy.task.tuple import ReceivedTuple, Tuple, values_class

log = logging.getLogger(__name__)

_getrandbits = random.getrandbits
_tuple_new = tuple.__new__
new_tuple = ReceivedTuple
# Value types the emit fast path accepts without a call; ints need a range check.
_FAST_TYPES = frozenset({str, float, bool, type(None), bytes})


class EmitError(ValueError):
    """An emit the topology does not allow (undeclared stream, wrong arity, bad direct task)."""


def check_emit(task: Any, route: Any, stream: str, values: Any) -> None:
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


def direct_targets(task: Any, route: Any, stream: str, direct_task: int | None) -> list[int]:
    if direct_task is None:
        raise EmitError(f"stream {stream!r} of {task.component_id!r} is direct: emit needs direct_task")
    if not route.direct:
        raise EmitError(f"direct_task given for stream {stream!r} of {task.component_id!r}, "
                        f"which is not declared direct")
    return [direct_task] if direct_task in route.direct_tasks else []


def debug_emit(task: Any, emit: Any) -> Any:
    """``topology.debug``: log every emitted tuple (always the general, slower path)."""

    def logged(values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
               direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        targets = emit(values, tup_id, stream, anchors, direct_task, True)
        log.info("emitted: component %s task %d stream %s values %r to tasks %s",
                 task.component_id, task.task_id, stream or "default", values, targets)
        return targets if need_task_ids else None

    return logged


def make_bolt_emit(task: "BoltTask") -> Any:
    """The bolt's ``emit``: a closure with a short path for the common case.

    Common case: default stream, values a list of plain scalars, auto-anchoring to the one
    tuple being processed, which has one root. Everything else (and every error) goes to
    ``task.emit_general``. Closure variables are faster than attribute lookups, which is
    the point: this runs once per emitted tuple.
    """
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
    fast_types = _FAST_TYPES
    getrandbits = _getrandbits
    key_cache = getattr(select, "key_cache", None)  # fields grouping on one field
    key_index = getattr(select, "key_index", 0)

    def emit(values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        if (stream is not None or tup_id is not None or anchors is not None or direct_task is not None
                or need_task_ids or type(values) is not list or len(values) != nfields
                or task.current_tups is not None or not task.auto_anchor):
            return general(values, tup_id, stream, anchors, direct_task, need_task_ids)
        for value in values:
            if type(value) not in fast_types:
                check(value)
        if key_cache is not None:
            key = values[key_index]
            targets = key_cache.get(key) if type(key) is str else None
            if targets is None:
                targets = select(values)
        else:
            targets = select(values)
        current = task.current
        if current is not None:
            roots = current._anchors
            if roots is not None:
                if len(roots) != 1:
                    return general(values, tup_id, stream, anchors, direct_task, need_task_ids)
                (root,) = roots
                acc = 0
                for target in targets:
                    edge = getrandbits(64)
                    acc ^= edge
                    box = outbox[target]
                    box.append(("default", tid, values, {root: edge}))
                    if len(box) >= batch_size:
                        send_full(target)
                current._ack_val ^= acc
                counter[0] += 1
                counter[1] += len(targets)
                return None
        message = ("default", tid, values, None)
        for target in targets:
            box = outbox[target]
            box.append(message)
            if len(box) >= batch_size:
                send_full(target)
        counter[0] += 1
        counter[1] += len(targets)
        return None

    return emit


class BoltTask(TaskBase):
    """One bolt task: the component's ``emit``/``ack``/``fail`` land here."""

    def __init__(self, executor: "BoltExecutor", task_id: int) -> None:
        super().__init__(executor, task_id)
        self.current: Tuple | None = None
        self.current_tups: list[Tuple] | None = None
        self.held: dict[int, Tuple] = {}
        self.backlog: list[list[Any]] = []
        self.auto_ack = True
        self.auto_anchor = True
        self.process: Any = None
        self.process_tick: Any = None
        self.emit = make_bolt_emit(self)

    def emit_general(self, values: Sequence[Any], tup_id: Any = None, stream: str | None = None,
                     anchors: Any = None, direct_task: int | None = None,
                     need_task_ids: bool = False) -> list[int] | None:
        """Every kind of emit: any stream, explicit anchors, direct tasks, several roots."""
        if tup_id is not None and stream is None and isinstance(tup_id, str):
            # pystorm's Bolt.emit(tup, stream=None, ...): a second positional argument is
            # the stream (bolts have no tuple ids of their own).
            stream = tup_id
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
        if anchors is None:
            if self.auto_anchor:
                anchors = self.current_tups
                if anchors is None:
                    current = self.current
                    if current is not None and current._anchors is not None:
                        roots = current._anchors
                        if len(roots) == 1:
                            # Fast path: one anchor tuple with one root.
                            (root,) = roots
                            for target in targets:
                                edge = _getrandbits(64)
                                current._ack_val ^= edge
                                box = outbox[target]
                                box.append((stream, tid, values, {root: edge}))
                                if len(box) >= batch_size:
                                    ex.send_full(target)
                            counter = ex.stats.stream_counter(stream)
                            counter[0] += 1
                            counter[1] += len(targets)
                            return list(targets) if need_task_ids else None
                        anchors = (current,)
        elif anchors:
            anchors = [a if isinstance(a, Tuple) else self._resolve(a) for a in anchors]
        message = None
        for target in targets:
            out_anchors = None
            if anchors:
                for anchor in anchors:
                    roots = getattr(anchor, "_anchors", None)
                    if not roots:
                        continue
                    edge = _getrandbits(64)
                    anchor._ack_val ^= edge
                    if out_anchors is None:
                        out_anchors = {}
                    for root in roots:
                        out_anchors[root] = out_anchors.get(root, 0) ^ edge
            if out_anchors is None:
                if message is None:
                    message = (stream, tid, values, None)
                msg = message
            else:
                msg = (stream, tid, values, out_anchors)
            box = outbox[target]
            box.append(msg)
            if len(box) >= batch_size:
                ex.send_full(target)
        counter = ex.stats.stream_counter(stream)
        counter[0] += 1
        counter[1] += len(targets)
        return list(targets) if need_task_ids else None

    def _resolve(self, tup: Any) -> Tuple | None:
        """pystorm also accepts a tuple id for ack/fail: find the held tuple it names."""
        if isinstance(tup, Tuple):
            return tup
        for held in list(self.held.values()):
            if held.id == tup:
                return held
        if self.current is not None and self.current.id == tup:
            return self.current
        log.warning("bolt %s task %d: ack/fail of unknown tuple id %r ignored", self.component_id, self.task_id, tup)
        return None

    def _settle(self, tup: Tuple | Any) -> Tuple | None:
        """The tuple (resolved from an id if need be) the first time it is acked or failed, else None."""
        if not isinstance(tup, Tuple):
            tup = self._resolve(tup)
            if tup is None:
                return None
        if tup._done:
            return None
        tup._done = True
        self.held.pop(id(tup), None)
        return tup

    def ack(self, tup: Tuple) -> None:
        tup = self._settle(tup)
        if tup is None:
            return
        anchors = tup._anchors
        ex = self.executor
        if anchors is not None and ex.num_ackers:
            pending = ex.pending_acks
            val = tup._ack_val
            for root, edge in anchors.items():
                pending[root] = pending.get(root, 0) ^ edge ^ val
        skey = tup._skey or (tup.component, tup.stream)
        ex.stats.acked[skey] += 1
        if tup._recv:
            ex.stats.add_latency(ex.stats.process_ms, skey, (time.monotonic() - tup._recv) * 1000.0)

    def fail(self, tup: Tuple) -> None:
        tup = self._settle(tup)
        if tup is None:
            return
        anchors = tup._anchors
        ex = self.executor
        if anchors is not None and ex.num_ackers:
            for root in anchors:
                ex.pending_acks.pop(root, None)
                dest = ex.acker_tasks[root % ex.num_ackers]
                ex.outbox[dest].append((ACK_FAIL, self.task_id, [root], None))
        ex.stats.failed[tup._skey or (tup.component, tup.stream)] += 1

    def on_crash(self) -> None:
        """Fail the tuple in hand, held tuples and tuples waiting in batches (they replay)."""
        component = self.component
        doomed: list[Tuple] = []
        if self.current is not None:
            doomed.append(self.current)
        doomed.extend(self.held.values())
        if component is not None and hasattr(component, "pending_tuples"):
            try:
                doomed.extend(component.pending_tuples())
            except Exception:
                log.exception("task %d: listing pending batch tuples failed", self.task_id)
        for tup in doomed:
            self.fail(tup)
        self.held.clear()
        self.current = None
        self.current_tups = None


class BoltExecutor(Executor):
    """Runs bolt tasks: batches in, ``process`` per tuple, batches out."""

    kind = "bolt"
    task_class = BoltTask

    def __init__(self, runtime: Any, start: int, end: int) -> None:
        super().__init__(runtime, start, end)
        self.pending_acks: dict[int, int] = {}
        self._dropped: dict[tuple[str, int], int] = {}
        self._sample = self.sample_every
        # stream -> {src task -> (component, values class, stats key)}: two dict gets per tuple
        self._by_stream: dict[str, dict[int, tuple[str, type, tuple[str, str]]]] = {}
        plan = self.plan
        for (src_comp, stream), _grouping in self.comp_plan.inputs.items():
            src_plan = plan.components.get(src_comp)
            if src_plan is None or stream not in src_plan.streams:
                continue
            cls = values_class(src_comp, stream, src_plan.streams[stream].fields)
            skey = (src_comp, stream)
            by_src = self._by_stream.setdefault(stream, {})
            for src_task in src_plan.tasks:
                by_src[src_task] = (src_comp, cls, skey)
        # The common case, one subscribed stream per source task, takes one dict get:
        # src task -> (stream, component, values class, stats key).
        self._single: dict[int, tuple[str, str, type, tuple[str, str]]] = {}
        streams_of: dict[int, list[str]] = {}
        for stream, by_src in self._by_stream.items():
            for src_task in by_src:
                streams_of.setdefault(src_task, []).append(stream)
        for src_task, streams in streams_of.items():
            if len(streams) == 1:
                self._single[src_task] = (streams[0], *self._by_stream[streams[0]][src_task])

    def _setup_timers(self, now: float) -> None:
        freq = self.conf.get("topology.tick.tuple.freq.secs")
        if freq:
            self.add_timer(float(freq), lambda: self._tick(freq), "tick")

    def _bind(self, task: BoltTask) -> None:
        component = task.component
        task.auto_anchor = bool(getattr(component, "auto_anchor", True))
        task.auto_ack = bool(getattr(component, "auto_ack", True)) and not getattr(component, "_manages_acks", False)
        task.process = component.process
        task.process_tick = getattr(component, "process_tick", None)

    def _has_acks(self) -> bool:
        return bool(self.pending_acks)

    def _flush_acks(self) -> None:
        pending = self.pending_acks
        if not pending:
            return
        outbox = self.outbox
        ackers = self.acker_tasks
        n = self.num_ackers
        src = self.start_task
        for root, val in pending.items():
            if val:
                outbox[ackers[root % n]].append((ACK_ACK, src, [root, val], None))
        pending.clear()

    # ------------------------------------------------------------ loop
    def _loop(self) -> None:
        queue = self.queue
        stop = self._stop
        wait = 0.0
        while not stop.is_set():
            # Idle executors flush at the end of each round, so the wait only needs to
            # cover the next timer; busy ones flush by size and by flush interval below.
            try:
                item = queue.get(timeout=max(wait, 0.0005))
            except Empty:
                item = None
            if item is not None:
                self._take(item)
                for _ in range(64):  # keep going while busy, but let timers and flushes run
                    try:
                        item = queue.get_nowait()
                    except Empty:
                        break
                    self._take(item)
                    if self.outbox and time.monotonic() - self._last_flush >= self.flush_secs:
                        self.flush()
            now = time.monotonic()
            wait = self._run_timers(now)
            self._flush_if_due(now)

    def _tick(self, freq: Any) -> None:
        for task in self.tasks.values():
            if task.component is None or task.process_tick is None:
                continue
            tup = Tuple(None, SYSTEM_COMPONENT, TICK, -1, [freq])
            tup._done = True
            try:
                task.process_tick(tup)
            except Exception as exc:
                self._crash(task, exc, "process_tick")

    def _after_restart(self, task: BoltTask) -> None:
        backlog, task.backlog = task.backlog, []
        for messages in backlog:
            self._on_messages(task, messages)

    def _on_messages(self, task: BoltTask, messages: list[Any]) -> None:
        if task.component is None:
            task.backlog.append(messages)  # processed by the re-created instance
            return
        batch_messages = getattr(task.component, "process_messages", None)
        if batch_messages is not None:
            self._on_raw_messages(task, batch_messages, messages)
            return
        by_stream = self._by_stream
        single = self._single
        process = task.process
        auto_ack = task.auto_ack
        held = task.held
        pending = self.pending_acks
        stats = self.stats
        ackers = self.num_ackers
        now = time.monotonic()
        sample = self._sample
        index = 0
        # executed/acked are counted per run of equal stats keys, not per tuple
        cur_key: Any = None
        n_exec = n_ack = 0
        run_root: int | None = None
        run_val = 0
        # A batch usually comes from one source task on one stream: the lookup of component,
        # values class and stats key is redone only when (src, stream) changes.
        last_src: Any = None
        last_stream: Any = None
        component_id: Any = None
        cls: Any = None
        skey: Any = None
        try:
            for index, message in enumerate(messages):
                stream, src, values, anchors = message
                if src != last_src or stream != last_stream:
                    fast = single.get(src)
                    if fast is not None and fast[0] == stream:
                        _stream, component_id, cls, skey = fast
                    else:
                        by_src = by_stream.get(stream)
                        info = by_src.get(src) if by_src is not None else None
                        if info is None:
                            last_src = None  # the locals above no longer match last_src
                            self._on_system(task, message)
                            continue
                        component_id, cls, skey = info
                    last_src, last_stream = src, stream
                    if skey is not cur_key:
                        self._count(cur_key, n_exec, n_ack)
                        cur_key, n_exec, n_ack = skey, 0, 0
                tup = new_tuple(component_id, stream, src, _tuple_new(cls, values), anchors, skey)
                task.current = tup
                sample -= 1
                if sample:
                    process(tup)
                else:
                    sample = self.sample_every
                    start = time.monotonic()
                    tup._recv = now
                    process(tup)
                    stats.add_latency(stats.execute_ms, skey, (time.monotonic() - start) * 1000.0)
                n_exec += 1
                if tup._done:
                    continue
                if auto_ack:
                    tup._done = True
                    n_ack += 1
                    if anchors is not None and ackers:
                        val = tup._ack_val
                        if len(anchors) == 1:
                            # One root (the common case): no items() iterator.
                            (root,) = anchors
                            # Consecutive tuples of one tree (a sentence's words) combine
                            # in locals; the dict is touched when the root changes.
                            if root == run_root:
                                run_val ^= anchors[root] ^ val
                            else:
                                if run_root is not None:
                                    pending[run_root] = pending.get(run_root, 0) ^ run_val
                                run_root, run_val = root, anchors[root] ^ val
                        else:
                            for root, edge in anchors.items():
                                if root == run_root:
                                    run_val ^= edge ^ val
                                else:
                                    if run_root is not None:
                                        pending[run_root] = pending.get(run_root, 0) ^ run_val
                                    run_root, run_val = root, edge ^ val
                    if tup._recv:
                        stats.add_latency(stats.process_ms, skey, (time.monotonic() - now) * 1000.0)
                else:
                    held[id(tup)] = tup
            task.current = None
        except Exception as exc:
            if run_root is not None:
                pending[run_root] = pending.get(run_root, 0) ^ run_val
            self._sample = sample
            self._count(cur_key, n_exec, n_ack)
            rest = messages[index + 1:]
            self._crash(task, exc, "process")
            if rest:
                task.backlog.append(rest)
            return
        if run_root is not None:
            pending[run_root] = pending.get(run_root, 0) ^ run_val
        self._sample = sample
        self._count(cur_key, n_exec, n_ack)

    def _count(self, key: Any, executed: int, acked: int) -> None:
        if key is not None:
            if executed:
                self.stats.executed[key] += executed
            if acked:
                self.stats.acked[key] += acked

    def _on_system(self, task: BoltTask, message: Any) -> None:
        stream = message[0]
        if stream == TICK:
            tup = Tuple(None, SYSTEM_COMPONENT, TICK, message[1], list(message[2]))
            tup._done = True
            task.process_tick(tup)
            return
        key = (stream, message[1])
        dropped = self._dropped.get(key, 0)
        self._dropped[key] = dropped + 1
        if dropped & (dropped - 1) == 0:  # log the 1st, 2nd, 4th, 8th, ... of each kind
            log.warning("bolt %s task %d: %d message(s) on unexpected stream %r from task %r dropped",
                        self.component_id, task.task_id, dropped + 1, stream, message[1])

    def _on_raw_messages(self, task: BoltTask, handler: Any, messages: list[Any]) -> None:
        """System bolts (the acker) take whole batches and return (dest, message) pairs."""
        try:
            out = handler(messages)
        except Exception as exc:
            self._crash(task, exc, "process_messages")
            return
        outbox = self.outbox
        for dest, message in out:
            outbox[dest].append(message)
