"""The batch protocol of one Trident task, independent of the executor API.

:class:`BatchCore` gets the task's inputs as plain calls (``on_data``, ``on_coord``,
``on_batch``, ``on_commit``, ``on_success``) with an opaque ``handle`` per input tuple and
talks back through a :class:`Port` (emit data, emit a direct coordination tuple anchored to
handles, ack / fail a handle, report an error). The bolt adapter in ``bolts.py`` maps those
onto today's Bolt API; a raw executor driver can replace it without touching this file.

Completion (Storm's TridentBoltExecutor): a batch is complete when the task holds one
coordination tuple from every upstream task (``expected_reports``) and has received as many
data tuples as those tuples announced. Spout groups complete right after emitting. Then the
group finishes (aggregates, queries, joins emit), a coordination tuple goes to every task of
every downstream stream (count 0 included) anchored to the held coordination tuples, and
those are acked. A group that holds state (``defer_finish``) acks at completion but finishes,
and so touches its state, only on ``$commit`` of the same attempt; downstream of it the batch
travels in the commit tree.

Attempts: tuples of an older attempt than the one a task holds are dropped; a newer attempt
replaces the older one. User code raising fails the batch: the error is reported, held
handles are failed (the coordinator replays the txid as a new attempt) and later tuples of
that attempt are dropped.
"""
from __future__ import annotations

import logging
import time
import traceback
from collections import Counter
from typing import Any, Protocol

from stormpy.trident.runtime.stats import LatencyWindow

log = logging.getLogger(__name__)

_CLOSED_KEEP = 1024


class Port(Protocol):
    def emit(self, stream: str, values: list) -> list[int]: ...
    def emit_coord(self, stream: str, task: int, values: list, anchors: list) -> None: ...
    def ack(self, handle: Any) -> None: ...
    def fail(self, handle: Any) -> None: ...
    def report_error(self, text: str) -> None: ...


class TrackedBatch:
    """One attempt of one txid in one task."""

    __slots__ = ("txid", "attempt", "tx", "reports", "expected", "received", "handles", "sent")

    def __init__(self, txid: int, attempt: int) -> None:
        self.txid = txid
        self.attempt = attempt
        self.tx = [txid, attempt]
        self.reports = 0            # coordination tuples received
        self.expected = 0           # data tuples they announced
        self.received = 0           # data tuples received
        self.handles: list[Any] = []
        self.sent: Counter[tuple[str, int]] = Counter()   # (stream, task) -> data tuples sent

    def __repr__(self) -> str:
        return f"<batch {self.txid}/{self.attempt} reports={self.reports} {self.received}/{self.expected}>"


class BatchCore:
    """Tracks this task's batches and drives its group runtime (see module docstring).

    ``out_coord``: (data stream, coordination stream, downstream task ids, at commit?) per output
    stream; in a group holding state, streams produced by or after a persist ("at commit") are
    finished and counted at ``$commit``, the others at batch completion.
    ``runtime``: a GroupRuntime (``feed``, ``emit_spout``, ``finish``, ``discard``).
    ``source``: the spout source of a spout group (``emit``, ``commit``, ``success``), else None.
    """

    def __init__(self, runtime: Any, port: Port, expected_reports: int,
                 out_coord: list[tuple[str, str, list[int], bool]], defer_finish: bool = False,
                 source: Any = None, name: str = "trident") -> None:
        self.runtime = runtime
        self.port = port
        self.expected_reports = expected_reports
        self.out_coord = out_coord
        self.defer_finish = defer_finish
        self.source = source
        self.name = name
        self.batches: dict[int, TrackedBatch] = {}
        self.awaiting_commit: dict[int, TrackedBatch] = {}
        self.closed: dict[int, int] = {}       # txid -> highest attempt completed or failed here
        self.stats = Counter()
        #: first sight of an attempt here -> its completion (this task's share of the batch latency)
        self.latency = LatencyWindow()
        #: called after a batch completes or commits here (the bolt publishes its metrics)
        self.publish: Any = None
        self.last_txid = 0

    # ------------------------------------------------------------ attempts
    def _batch(self, tx: Any) -> TrackedBatch | None:
        """The live batch for ``tx`` (created on first sight), or None for a stale attempt."""
        txid, attempt = int(tx[0]), int(tx[1])
        if self.closed.get(txid, -1) >= attempt:
            return None
        batch = self.batches.get(txid)
        if batch is not None:
            if batch.attempt == attempt:
                return batch
            if batch.attempt > attempt:
                return None
            self._drop(batch)
        waiting = self.awaiting_commit.get(txid)
        if waiting is not None:
            if waiting.attempt >= attempt:
                return None
            del self.awaiting_commit[txid]
            self.runtime.discard(txid)
        batch = self.batches[txid] = TrackedBatch(txid, attempt)
        self.latency.start(txid, attempt, time.monotonic())
        return batch

    def _drop(self, batch: TrackedBatch) -> None:
        """An older attempt was superseded: its tree already failed; let go of what it held."""
        self.batches.pop(batch.txid, None)
        self.latency.forget(batch.txid, batch.attempt)
        for handle in batch.handles:
            self.port.fail(handle)
        self.runtime.discard(batch.txid)

    def _fail(self, batch: TrackedBatch, exc: BaseException | None, where: str, extra: Any = None) -> None:
        if exc is not None:
            text = "".join(traceback.format_exception(exc))
            log.warning("trident %s: batch %d attempt %d failed in %s: %s", self.name, batch.txid,
                        batch.attempt, where, exc)
            self.port.report_error(f"{where} (txid {batch.txid}, attempt {batch.attempt}): {text}")
        self.stats["batches.failed"] += 1
        self.latency.forget(batch.txid, batch.attempt)
        self.batches.pop(batch.txid, None)
        self.awaiting_commit.pop(batch.txid, None)
        self._close(batch)
        for handle in batch.handles:
            self.port.fail(handle)
        batch.handles = []
        if extra is not None:
            self.port.fail(extra)
        self.runtime.discard(batch.txid)

    # ------------------------------------------------------------ inputs
    def on_data(self, stream: str, tx: Any, values: list, handle: Any) -> None:
        self.port.ack(handle)  # data tuples are not anchored: settling them costs nothing
        batch = self._batch(tx)
        if batch is None:
            return
        batch.received += 1
        try:
            self.runtime.feed(stream, batch, values)
        except Exception as exc:
            self._fail(batch, exc, "execute")
            return
        self._check(batch)

    def on_coord(self, tx: Any, count: int, handle: Any) -> None:
        batch = self._batch(tx)
        if batch is None:
            self.port.fail(handle)
            return
        batch.reports += 1
        batch.expected += int(count)
        batch.handles.append(handle)
        self._check(batch)

    def on_batch(self, tx: Any, handle: Any) -> None:
        """A spout group's ``$batch``: emit the spout's batch, then it is complete."""
        batch = self._batch(tx)
        if batch is None:
            self.port.fail(handle)
            return
        batch.handles.append(handle)
        collector = _SpoutCollector(self.runtime, batch)
        try:
            self.source.emit(batch.txid, batch.attempt, collector)
        except Exception as exc:
            self._fail(batch, exc, "emit_batch (spout and the operations fused after it)")
            return
        self.stats["spout.tuples"] += collector.count
        self._complete(batch)

    def on_commit(self, tx: Any, handle: Any) -> None:
        txid, attempt = int(tx[0]), int(tx[1])
        anchors = [handle]
        if self.defer_finish:
            batch = self.awaiting_commit.get(txid)
            if batch is None or batch.attempt != attempt:
                log.info("trident %s: $commit of txid %d attempt %d not held complete here; failing it",
                         self.name, txid, attempt)
                self.port.fail(handle)
                return
            del self.awaiting_commit[txid]
            if not self._finish(batch, anchors, handle, "commit"):
                return
        if self.source is not None:
            try:
                ok = self.source.commit(txid, attempt)
            except Exception as exc:
                self._fail(TrackedBatch(txid, attempt), exc, "spout commit", handle)
                return
            if not ok:
                self.port.fail(handle)
                return
        self.stats["batches.committed"] += 1
        if self.publish is not None:
            self.publish()
        self.port.ack(handle)

    def on_success(self, tx: Any, handle: Any) -> None:
        txid = int(tx[0])
        for old in [t for t in self.closed if t < txid]:
            del self.closed[old]
        if self.source is not None:
            try:
                self.source.success(txid)
            except Exception as exc:
                text = "".join(traceback.format_exception(exc))
                self.port.report_error(f"spout success/ack (txid {txid}): {text}")
        self.port.ack(handle)

    # ------------------------------------------------------------ completion
    def _check(self, batch: TrackedBatch) -> None:
        if batch.reports >= self.expected_reports and batch.received == batch.expected \
                and self.expected_reports:
            self._complete(batch)

    def _close(self, batch: TrackedBatch) -> None:
        """Later tuples of this attempt (or older ones) are stale from now on."""
        self.closed[batch.txid] = max(batch.attempt, self.closed.get(batch.txid, -1))
        if len(self.closed) > _CLOSED_KEEP:
            for txid in sorted(self.closed)[:len(self.closed) - _CLOSED_KEEP]:
                del self.closed[txid]

    def _complete(self, batch: TrackedBatch) -> None:
        self.latency.stop(batch.txid, batch.attempt, time.monotonic())
        self.last_txid = max(self.last_txid, batch.txid)
        if self.publish is not None:
            self.publish()
        self.batches.pop(batch.txid, None)
        self._close(batch)
        handles, batch.handles = batch.handles, []
        batch.handles = handles
        if self.defer_finish:
            if not self._finish(batch, handles, None, "batch"):
                return
            batch.handles = []
            self.awaiting_commit[batch.txid] = batch
            for handle in handles:
                self.port.ack(handle)
            return
        if self._finish(batch, handles, None):
            for handle in handles:
                self.port.ack(handle)

    def _finish(self, batch: TrackedBatch, anchors: list[Any], extra: Any, phase: str | None = None) -> bool:
        """Finish the group (or one phase of it) for ``batch``; tell downstream tasks what they got."""
        try:
            self.runtime.finish(batch, phase)
        except Exception as exc:
            self._fail(batch, exc, "finish_batch", extra)
            return False
        emit_coord = self.port.emit_coord
        sent = batch.sent
        for stream, coord, tasks, late in self.out_coord:
            if phase is not None and late != (phase == "commit"):
                continue
            for task in tasks:
                emit_coord(coord, task, [batch.tx, sent.get((stream, task), 0)], anchors)
        self.stats["batches.finished"] += 1
        return True

    def send(self, stream: str, batch: TrackedBatch, values: list) -> None:
        """GroupRuntime's exit: a data tuple to another group, counted per receiving task."""
        targets = self.port.emit(stream, [batch.tx, *values])
        sent = batch.sent
        for task in targets:
            sent[(stream, task)] += 1


class _SpoutCollector:
    """What a Trident spout emits through during ``emit_batch``."""

    __slots__ = ("entry", "batch", "count")

    def __init__(self, runtime: Any, batch: TrackedBatch) -> None:
        # A GroupRuntime hands out the processor the spout's tuples enter (one call per tuple).
        self.entry = getattr(runtime, "spout_entry", None) or runtime.emit_spout
        self.batch = batch
        self.count = 0

    def emit(self, values: Any) -> None:
        self.count += 1
        self.entry(self.batch, list(values))

    def report_error(self, text: Any) -> None:
        log.error("trident spout reported: %s", text)
