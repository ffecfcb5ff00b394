"""Bolt executors: receive batches, hand them to each task's driver, combine acks, emit.

The per-tuple path is :class:`stormpy.task.drivers.TupleDriver` (one Tuple and one
``process`` call per message) and the bolt's ``emit`` (``stormpy.task.emit``): no locks, no
per-tuple queue operations. Acks are XOR-combined per root id by the executor's
``TupleTrees`` (``stormpy.task.tree``) and become ``__ack_ack`` messages when the outbox is
flushed (XOR is associative, so the acker reaches the same value). Which driver a task gets is the component's choice (``Bolt.make_driver``).
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from operator import itemgetter
from queue import Empty
from typing import TYPE_CHECKING, Any

from stormpy.streams import SYSTEM_COMPONENT, TICK
from stormpy.task.drivers import Driver
from stormpy.task.emit import Message, make_emit
from stormpy.task.executor import Executor, TaskBase
from stormpy.task.tree import ANCHOR_ELSEWHERE, Hand, bolt_place, fast_bolt_emit
from stormpy.api.tuple import Tuple, values_class

if TYPE_CHECKING:
    from stormpy.api.contract import BoltOutputCollector
    from stormpy.task.runtime import WorkerRuntime

    def _implements_the_contract(task: BoltTask) -> BoltOutputCollector:
        return task   # mypy checks that a BoltTask is what the component contract says

log = logging.getLogger(__name__)

_ROUTE = itemgetter(0, 1)   # a message's (stream, source task)
_STREAM = itemgetter(0)
_SOURCE = itemgetter(1)

# A received batch is handed to the driver in slices; a slice that takes longer than
# _SLOW_SLICE_SECS shrinks the slice size to what takes about half that (down to one
# message), a fast one doubles it. Acks and
# emits are flushed between slices, so a slow bolt (50 ms a tuple) acks as it goes instead of
# once per 1000-tuple batch, 50 s later, when every tree has timed out.
_MAX_SLICE = 1 << 16
_SLOW_SLICE_SECS = 0.1
_STEP_BATCHES = 64       # batches one scheduler step takes before the next executor's turn ...
_STEP_SECS = 0.02        # ... or once it has worked this long
_NO_DEADLINE = float("inf")   # an executor on its own thread: no other executor waits for it


class BoltTask(TaskBase):
    """One bolt task: the component's ``emit``/``ack``/``fail`` land here."""

    def __init__(self, executor: "BoltExecutor", task_id: int) -> None:
        super().__init__(executor, task_id)
        self.executor: BoltExecutor = executor
        #: Set by ``Bolt.anchored(tups)``: emits without explicit anchors anchor to these.
        self.batch_anchors: list[Any] | None = None
        self.held: dict[int, Tuple] = {}
        self.backlog: list[list[Any]] = []
        self.backlog_held = 0      # messages of ``backlog`` counted in the executor's ``queued``
        self.auto_anchor = True
        #: The tuple in hand (``current``) and what the fast emit (``tree.fast_bolt_emit``)
        #: needs of it: the anchors to extend and the edges emitted from it not yet in its ack
        #: value (see ``tree.Hand``).
        self.hand = Hand()
        self.driver: Any = None          # Driver, set by _bind
        self.process_tick: Any = None    # the component's process_tick, set by _bind
        self.emit = make_emit(self, bolt_place(self), fast_bolt_emit, starts_trees=False)

    @property
    def current(self) -> Tuple | None:
        """The tuple being processed (kept in ``hand``, which the receive loop sets per tuple)."""
        return self.hand.current

    @current.setter
    def current(self, tup: Tuple | None) -> None:
        self.hand.current = tup

    @contextmanager
    def anchored(self, tups: Iterable[Any]) -> Iterator[None]:
        """Within the block, emits without ``anchors=`` are anchored to ``tups``."""
        previous, hand = self.batch_anchors, self.hand
        previous_hand = hand.roots
        self.batch_anchors = list(tups)
        hand.roots = ANCHOR_ELSEWHERE
        try:
            yield
        finally:
            self.batch_anchors = previous
            hand.roots = previous_hand

    def fold_hand(self) -> None:
        """Move the edges the fast emit kept in ``hand.edges`` into the tuple in hand, before
        its ack value is read or another tuple takes its place."""
        hand = self.hand
        if hand.edges:
            if hand.current is not None:
                hand.current._ack_val ^= hand.edges
            hand.edges = 0

    def resolve(self, tup: Any) -> Tuple | None:
        """pystorm also accepts a tuple id for ack/fail: find the held tuple it names."""
        if isinstance(tup, Tuple):
            return tup
        for held in list(self.held.values()):
            if held.id == tup:
                return held
        current = self.hand.current
        if current is not None and current.id == tup:
            return current
        log.warning("bolt %s task %d: ack/fail of unknown tuple id %r ignored", self.component_id, self.task_id, tup)
        return None

    def _settle(self, tup: Tuple | Any) -> Tuple | None:
        """The tuple (resolved from an id if need be) the first time it is acked or failed, else None."""
        if not isinstance(tup, Tuple):
            tup = self.resolve(tup)
            if tup is None:
                return None
        if tup._done:
            return None
        tup._done = True
        self.held.pop(id(tup), None)
        return tup

    def ack(self, tup: Tuple | Any) -> None:
        settled = self._settle(tup)
        if settled is None:
            return
        self.fold_hand()
        self.trees.settle(settled._anchors, settled._ack_val)
        stats = self.executor.stats
        skey = settled._skey or (settled.component, settled.stream)
        stats.acked[skey] += 1
        if settled._recv:
            stats.add_latency(stats.process_ms, skey, (time.monotonic() - settled._recv) * 1000.0)

    def ack_many(self, tups: Iterable[Tuple]) -> None:
        """``ack`` for a whole batch of Tuples (batching bolts): acks XOR-combined per root and
        the stats counted once per (component, stream) run."""
        self.fold_hand()
        stats = self.executor.stats
        held_pop = self.held.pop
        acked = stats.acked
        fresh: list[Tuple] = []
        skey: Any = None
        run = 0
        for tup in tups:
            if tup._done:
                continue
            tup._done = True
            held_pop(id(tup), None)
            fresh.append(tup)
            key = tup._skey or (tup.component, tup.stream)
            if key != skey:
                if run:
                    acked[skey] += run
                skey, run = key, 0
            run += 1
            if tup._recv:  # a sampled tuple: its process latency spans its wait in the batch
                stats.add_latency(stats.process_ms, key, (time.monotonic() - tup._recv) * 1000.0)
        if run:
            acked[skey] += run
        self.trees.settle_tuples(fresh)

    def fail(self, tup: Tuple | Any) -> None:
        settled = self._settle(tup)
        if settled is None:
            return
        self.trees.fail_roots(settled._anchors, self.task_id)
        self.executor.stats.failed[settled._skey or (settled.component, settled.stream)] += 1

    def ack_messages(self, messages: list[Message]) -> None:
        """``ack_message`` for a whole batch of raw messages (a batching bolt that keeps raw
        messages, the Spark sink): every edge settled in one pass, the acked counter added
        once per (source task, stream)."""
        anchors = [m[3] for m in messages if m[3] is not None]
        if anchors:
            self.trees.settle_raw_batch(anchors)
        ex = self.executor
        acked = ex.stats.acked
        if not messages:
            return
        first, n = messages[0], len(messages)
        if list(map(_SOURCE, messages)).count(first[1]) == n and list(map(_STREAM, messages)).count(first[0]) == n:
            acked[ex.stats_key(first)] += n   # one source task (the usual): no pair per message
            return
        for (stream, src), count in Counter(map(_ROUTE, messages)).items():
            acked[ex.stats_key((stream, src, None, None))] += count

    def count_executed(self, key: tuple[str, str], n: int) -> None:
        """Count ``n`` messages of one (component, stream) as executed (raw-batch bolts that
        take messages as rows; per-tuple drivers count their own)."""
        self.executor.stats.executed[key] += n

    def send(self, dest: int, message: Message) -> None:
        """Queue a ready-made message for task ``dest`` (framework bolts: the acker's answers)."""
        self.executor.outbox.add(dest, message)

    def ack_message(self, message: Message) -> None:
        """Settle a raw message's edges (and those emitted anchored to it, already combined)."""
        self.trees.settle(message[3])
        ex = self.executor
        ex.stats.acked[ex.stats_key(message)] += 1

    def fail_message(self, message: Message) -> None:
        """Fail the trees of a raw message at once."""
        self.trees.fail_roots(message[3], self.task_id)
        ex = self.executor
        ex.stats.failed[ex.stats_key(message)] += 1

    @contextmanager
    def processing(self, tup: Tuple) -> Iterator[None]:
        """Within the block ``tup`` is the tuple in hand (see the component contract); on an
        exception it stays in hand, so the crash handler fails it."""
        self.fold_hand()   # hand.edges belong to the tuple in hand until now
        hand = self.hand
        previous, previous_hand = hand.current, hand.roots
        hand.current, hand.roots = tup, ANCHOR_ELSEWHERE
        yield
        hand.current, hand.roots = previous, previous_hand

    def on_crash(self) -> None:
        """Fail the tuple in hand, held tuples and what the driver holds (they replay)."""
        doomed: list[Any] = []
        if self.hand.current is not None:
            doomed.append(self.hand.current)
        doomed.extend(self.held.values())
        if self.driver is not None:
            try:
                doomed.extend(self.driver.pending())
            except Exception:
                log.exception("task %d: listing the tuples the driver holds failed", self.task_id)
        for item in doomed:
            if type(item) is tuple:
                self.fail_message(item)
            else:
                self.fail(item)
        self.held.clear()
        self.batch_anchors = None
        self.hand.clear()


#: What the receive loop needs of a (source task, stream): the source component, the values
#: class, the stats key and, for one-field streams, the cache of shared values (else None).
SourceInfo = tuple[str, type, tuple[str, str], dict[str, Any] | None]


class BoltExecutor(Executor[BoltTask]):
    """Runs bolt tasks: batches in, each task's driver, batches out."""

    kind = "bolt"
    task_class = BoltTask

    def __init__(self, runtime: WorkerRuntime, start: int, end: int) -> None:
        super().__init__(runtime, start, end)
        self._dropped: dict[tuple[str, int], int] = {}
        self.backlog_dropped = 0   # messages for down tasks failed beyond the bound
        self._slice = _MAX_SLICE
        self.sample_countdown = self.settings.sample_every
        # stream -> {src task -> SourceInfo}: two dict gets per tuple
        self.by_stream: dict[str, dict[int, SourceInfo]] = {}
        plan = self.plan
        for (src_comp, stream), _grouping in self.comp_plan.inputs.items():
            src_plan = plan.components.get(src_comp)
            if src_plan is None or stream not in src_plan.streams:
                continue
            fields = src_plan.streams[stream].fields
            cls = values_class(src_comp, stream, fields)
            # one-field streams share the values of repeated short strings (see drivers.py)
            cache: dict[str, Any] | None = {} if len(fields) == 1 else None
            info = (src_comp, cls, (src_comp, stream), cache)
            by_src = self.by_stream.setdefault(stream, {})
            for src_task in src_plan.tasks:
                by_src[src_task] = info
        # The common case, one subscribed stream per source task, takes one dict get:
        # src task -> (stream, *SourceInfo).
        self.single_stream: dict[int, tuple[str, str, type, tuple[str, str], dict[str, Any] | None]] = {}
        streams_of: dict[int, list[str]] = {}
        for stream, by_src in self.by_stream.items():
            for src_task in by_src:
                streams_of.setdefault(src_task, []).append(stream)
        for src_task, streams in streams_of.items():
            if len(streams) == 1:
                self.single_stream[src_task] = (streams[0], *self.by_stream[streams[0]][src_task])

    def _setup_timers(self, now: float) -> None:
        freq = self.settings.tick_freq_secs
        if freq:
            value = int(freq) if freq == int(freq) else freq  # the tick's value, as configured
            self.add_timer(freq, lambda: self._tick(value), "tick")

    def _bind(self, task: BoltTask) -> None:
        component = task.component
        task.auto_anchor = bool(component.auto_anchor)
        task.process_tick = component.process_tick
        task.driver = component.make_driver(task)

    def source_info(self, task: BoltTask, message: Message) -> SourceInfo | None:
        """(component, values class, stats key, values cache) of a message's (source task,
        stream), or None for a message on no subscribed stream (then handed to
        ``on_system_message``)."""
        stream, src = message[0], message[1]
        fast = self.single_stream.get(src)
        if fast is not None and fast[0] == stream:
            return fast[1], fast[2], fast[3], fast[4]
        by_src = self.by_stream.get(stream)
        info = by_src.get(src) if by_src is not None else None
        if info is None:
            self.on_system_message(task, message)
        return info

    def stats_key(self, message: Message) -> tuple[str, str]:
        """(source component, stream) of a raw message, for the acked/failed counters."""
        return (self.plan.task_component.get(message[1], "?"), message[0])

    def before_close_tasks(self) -> None:
        """Each task's driver hands over held-back work (batching bolts run their batches)."""
        for task in self.tasks.values():
            if task.component is None or task.driver is None:
                continue
            try:
                task.driver.before_close()
            except Exception as exc:
                self._crash(task, exc, "before_close")

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
                # keep going while busy (batches joined), but let timers and flushes run
                self._take_joined(_STEP_BATCHES, _NO_DEADLINE)
            now = time.monotonic()
            wait = self._run_timers(now)
            self._flush_if_due(now)

    def step(self) -> float:
        """One round for a scheduler: up to ``_STEP_BATCHES`` batches (or ``_STEP_SECS`` of work),
        due timers, a flush."""
        took = 0
        until = time.monotonic() + _STEP_SECS
        queue = self.queue
        while took < _STEP_BATCHES and not queue.empty():
            took += self._take_joined(_STEP_BATCHES - took, until)
            if time.monotonic() >= until:
                break
        now = time.monotonic()
        wait = 0.05
        if now >= self.next_timer:
            wait = min(self._run_timers(now), wait)
            self.next_timer = now + wait
        self._flush_if_due(now)
        return 0.0 if took else max(self.next_timer - now, 0.0)

    def _take_joined(self, most: int, until: float) -> int:
        """Dequeue up to ``most`` queued items, joining consecutive batches for one task into one
        while it holds fewer than ``topology.transfer.batch.size`` messages; returns the items
        taken.

        Why: with several upstream executors (parallelism > 1) a bolt's input arrives as more,
        smaller batches (at parallelism 2 a count task gets two of ~150 words per round where
        parallelism 1 gets one of ~600, and the acker five where it got three), and each batch
        pays the driver's fixed cost (its setup, settling, counting; the acker's answers).
        Joined, the driver runs once per task and round, where its driver allows it
        (``Driver.joins``: not for raw-batch bolts, which keep nothing of a crashed call). Order is kept: a control call or a
        batch for another task ends the join and is taken after it. Between joined batches,
        as between batches before, a due flush runs and the step's time (``until``) is checked.

        The first batch's list is extended in place: a batch handed to ``enqueue`` is this
        executor's (``Outbox.send_full`` pops it from the sender's boxes; the wire decodes a new
        one per frame, or a tuple, which is copied). A copy touched every message of the first
        batch once more, after it had left the first-level cache: with ``next()`` in the
        shuffle grouping, extending in place took the local word count at par 2 from 44.6 to
        43.8 first-level data cache misses a word (cachegrind, compiled).
        """
        queue = self.queue
        limit = self.settings.transfer_batch_size
        group_task: int | None = None
        group: list[Any] = []
        joins = False
        taken = 0
        while taken < most and not queue.empty():
            item = queue.get_nowait()   # one consumer: not empty means get succeeds
            taken += 1
            task_id, payload = item
            if task_id is not None and task_id == group_task and joins and len(group) < limit:
                if type(group) is not list:
                    group = list(group)   # a batch off the wire may be a tuple
                group += payload   # in place: see the docstring
                continue
            if group_task is not None:
                self._take((group_task, group))
                group_task = None
                if self._after_batch(until):
                    self._take(item)   # the step's time is up: this one alone, as before
                    return taken
            if task_id is None:
                self._take(item)
                continue
            group_task, group = task_id, payload
            task = self.tasks.get(task_id)
            joins = task is not None and bool(getattr(task.driver, "joins", False))   # BoltDriver need not have it
        if group_task is not None:
            self._take((group_task, group))
            self._after_batch(until)
        return taken

    def _after_batch(self, until: float) -> bool:
        """A flush when one is due by time; whether the step's time is up.

        In a scheduler loop the flush also hands off what the round held (``Waker.hand_off``):
        a step working through a backlog (a count task's share of another worker's round) would
        otherwise keep its acks and its batches for other workers until the round ended, up to
        ``_STEP_SECS`` later, while the spouts waiting on those acks sat at
        ``topology.max.spout.pending`` and their workers idled. The cluster word count
        (compiled, alternating runs) counted 1.37M, 0.67M and 0.85M words/s, its workers 74-96%
        busy; handed off here 1.45M, 1.36M and 1.15M, 96-99% busy (pure: 0.80M and 0.71M
        against 0.69M and 0.61M before this and ``ZmqTransfer.send_many``'s packing)."""
        now = time.monotonic()
        if now - self._last_flush >= self.settings.flush_interval_secs:
            self._flush_mid_step(now)
        return now >= until

    def _flush_mid_step(self, now: float) -> None:
        """A step's due flush, and the loop's hand-off after it (see ``_after_batch``)."""
        if self.outbox or self.trees.has_acks():
            self.flush()
        else:
            self._last_flush = now
        waker = self.waker
        if waker is not None:
            waker.hand_off(self)

    def _on_messages(self, task: BoltTask, messages: list[Any]) -> None:
        if task.component is None:
            self._hold_for_restart(task, messages)
            return
        driver = task.driver
        step = self._slice
        if len(messages) <= step:
            started = time.monotonic()
            try:
                driver.on_messages(messages)
            except Exception as exc:
                self._crash(task, exc, driver.where)
                return
            self._resize_slice(time.monotonic() - started, len(messages))
            return
        self._on_slices(task, driver, messages)

    def _on_slices(self, task: BoltTask, driver: Driver, messages: list[Message]) -> None:
        """A batch larger than the current slice: hand it over in slices, flushing in between."""
        index, n = 0, len(messages)
        while index < n:
            step = self._slice
            part = messages[index:index + step]
            index += len(part)
            started = time.monotonic()
            try:
                driver.on_messages(part)
            except Exception as exc:
                self._crash(task, exc, driver.where)
                if index < n:
                    self._hold_for_restart(task, messages[index:])
                return
            now = time.monotonic()
            self._resize_slice(now - started, len(part))
            if index < n:
                if self._stop.is_set():
                    return   # stopping: the rest times out and replays
                if now - self._last_flush >= self.settings.flush_interval_secs:
                    self._flush_mid_step(now)

    def _resize_slice(self, secs: float, handled: int) -> None:
        """Aim at slices of about half ``_SLOW_SLICE_SECS`` from the last one's time per message."""
        if secs > _SLOW_SLICE_SECS:
            self._slice = max(1, min(self._slice, int(handled * _SLOW_SLICE_SECS / 2 / secs)))
        elif secs < _SLOW_SLICE_SECS / 4 and self._slice < _MAX_SLICE:
            self._slice *= 2

    def _tick(self, freq: Any) -> None:
        for task in self.tasks.values():
            if task.component is None:
                continue
            tup = Tuple(None, SYSTEM_COMPONENT, TICK, -1, [freq])
            tup._done = True
            try:
                task.process_tick(tup)
            except Exception as exc:
                self._crash(task, exc, "process_tick")

    def _hold_for_restart(self, task: BoltTask, messages: list[Any]) -> None:
        """Keep a batch for the re-created instance; it still counts as queued (backpressure).

        A task that is down (crashed, backing off, or never able to initialize) would
        otherwise swallow everything upstream sends while the spouts, seeing an empty
        queue, keep emitting. Held messages stay in ``queued`` until the task is back, so
        the executor reports itself overloaded; the backlog is capped at the receive
        buffer size, the oldest batches beyond it failed (their trees replay).
        """
        n = len(messages)
        with self._qlock:
            self.queued += n
            if self.queued > self.high_watermark:
                self.overloaded = True
        task.backlog.append(messages)
        task.backlog_held += n
        limit = self.settings.receive_buffer_size
        while task.backlog_held > limit and len(task.backlog) > 1:
            dropped = task.backlog.pop(0)
            self._release_held(task, len(dropped))
            self.backlog_dropped += len(dropped)
            for message in dropped:
                if type(message) is tuple and len(message) == 4:
                    try:
                        task.fail_message(message)
                    except Exception:  # noqa: BLE001 - a bad message must not stop the bound
                        log.debug("bolt %s: failing a dropped backlog message raised", self.name, exc_info=True)
            log.warning("bolt %s task %d is down: dropped (failed) %d queued message(s) beyond the "
                        "receive buffer of %d", self.component_id, task.task_id, len(dropped), limit)

    def _release_held(self, task: BoltTask, n: int) -> None:
        task.backlog_held -= n
        with self._qlock:
            self.queued -= n
            if self.overloaded and self.queued < self.low_watermark:
                self.overloaded = False

    def _after_restart(self, task: BoltTask) -> None:
        backlog, task.backlog = task.backlog, []
        self._release_held(task, task.backlog_held)
        for messages in backlog:
            self._on_messages(task, messages)

    def count(self, key: Any, executed: int, acked: int) -> None:
        """Add a run of executed/acked tuples of one (component, stream) to the stats."""
        if key is not None:
            if executed:
                self.stats.executed[key] += executed
            if acked:
                self.stats.acked[key] += acked

    def on_system_message(self, task: BoltTask, message: Message) -> None:
        """A message on no subscribed stream: a tick from the wire, else dropped with a warning."""
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
