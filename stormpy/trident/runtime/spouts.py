"""Trident spouts (DESIGN 7.1) and the sources that drive them inside spout executor bolts.

User classes: :class:`BatchSpout` (Storm's IBatchSpout), :class:`PartitionedSpout`
(IPartitionedTridentSpout: transactional, a txid's batch never changes) and
:class:`OpaquePartitionedSpout` (a replayed txid may carry other tuples; every tuple lands in
exactly one committed batch). Partitions are dealt to the spout's tasks by index (partition i
to task i mod n).

Sources (runtime, one per spout executor task, on its executor thread) keep per-partition
metas in TransactionalState under ``spouts/<stream>/<partition>/<txid>``, Storm's
RotatingTransactionalState:

- transactional: the meta of (txid, partition) is stored before the batch's coordination
  tuples leave the task, so a replay, after any crash, re-emits exactly that meta's tuples;
- opaque: metas are stored when the txid commits (the spout executor is a committer); an
  emit of txid n starts from the meta emitted for n-1 in this chain, else the newest committed
  meta below n.

``$success`` of txid n prunes metas below n.

Against ZooKeeper each meta write is a round trip or two (about 2-3 ms for a new node here) that
used to block the spout executor's thread twice per partition and batch (store, prune). A
:class:`MetaWriter` moves them off that thread: a partition's meta is stored while the next
partition's tuples are emitted, the last partition's is stored by the task itself (it would
only wait for it), and ``emit`` returns once every store is done (so still before the
coordination tuples leave); pruning is fire-and-forget (a prune lost in a crash leaves metas
below the committed txid, which nothing reads and a restarted task prunes). An in-process
store (``stormpy local``) is written inline.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from stormpy.cluster_state import MemoryTransactionalState
from stormpy.cluster_state.transactional import snapshot
from stormpy.trident.state import txstate as tx

log = logging.getLogger(__name__)


class _TridentSpout:
    outputs: Any = None

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        """Called once per spout executor task."""

    def close(self) -> None:
        """Called when the task stops."""

    def ack(self, txid: int) -> None:
        """The batch of ``txid`` committed."""


class BatchSpout(_TridentSpout):
    """``emit_batch(batch_id, collector)``: transactional only if it re-emits the same tuples per id."""

    def emit_batch(self, batch_id: int, collector: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}.emit_batch(batch_id, collector)")


class PartitionedSpout(_TridentSpout):
    """Transactional partitioned spout: a txid's meta is stored, so a replay is identical."""

    def partitions(self) -> list:
        raise NotImplementedError(f"{type(self).__name__}.partitions()")

    def emit_new_batch(self, txid: int, collector: Any, partition: Any, last_meta: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.emit_new_batch(txid, collector, partition, last_meta)")

    def emit_batch(self, txid: int, collector: Any, partition: Any, meta: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}.emit_batch(txid, collector, partition, meta)")


class OpaquePartitionedSpout(_TridentSpout):
    """Opaque partitioned spout: ``emit_batch(txid, collector, partition, last_meta) -> meta``."""

    def partitions(self) -> list:
        raise NotImplementedError(f"{type(self).__name__}.partitions()")

    def emit_batch(self, txid: int, collector: Any, partition: Any, last_meta: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.emit_batch(txid, collector, partition, last_meta)")


def spout_kind(spout: Any) -> str | None:
    if isinstance(spout, OpaquePartitionedSpout):
        return "opaque"
    if isinstance(spout, PartitionedSpout):
        return "partitioned"
    if isinstance(spout, BatchSpout):
        return "batch"
    return None


# ------------------------------------------------------------------ runtime
class _SerialThread:
    """One daemon thread running the calls it is given in order. (A ThreadPoolExecutor's threads
    are joined at interpreter exit: one stuck in a ZooKeeper retry would hold up a worker's exit.)"""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        self._queue.put((future, fn))
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

    def close(self) -> None:
        """Stop after what is queued (the thread is a daemon: nothing waits for it)."""
        self._queue.put(None)


class MetaWriter:
    """Runs a source's TransactionalState writes: inline for an in-process store, else on two
    threads of its own (stores, which ``emit`` waits for, and prunes, which nobody waits for)."""

    def __init__(self, state: Any, name: str) -> None:
        self.inline = isinstance(state, MemoryTransactionalState)
        self.name = name
        self._stores: _SerialThread | None = None
        self._prunes: _SerialThread | None = None

    def defers(self, now: bool) -> bool:
        """Whether :meth:`store` with this ``now`` runs the write later, on its thread."""
        return not (self.inline or now)

    def store(self, write: Callable[[], None], now: bool = False) -> Future | None:
        """Start ``write``; the future to wait for (None: already done inline). ``now``: the
        caller would wait for it right away, so it runs on the caller's thread (not queued
        behind an earlier store, which then proceeds while the caller waits on I/O)."""
        if not self.defers(now):
            write()
            return None
        if self._stores is None:
            self._stores = _SerialThread(f"trident-metas-{self.name}")
        return self._stores.submit(write)

    def prune(self, delete: Callable[[], None]) -> None:
        if self.inline:
            delete()
            return
        if self._prunes is None:
            self._prunes = _SerialThread(f"trident-prune-{self.name}")
        self._prunes.submit(lambda: self._quietly(delete))

    def _quietly(self, delete: Callable[[], None]) -> None:
        try:
            delete()
        except Exception:
            log.warning("trident spout %s: pruning old metas failed (they stay stored; a restarted task "
                        "loads and prunes them)", self.name, exc_info=True)

    def close(self) -> None:
        for thread in (self._stores, self._prunes):
            if thread is not None:
                thread.close()
        self._stores = self._prunes = None


class RotatingMetas:
    """txid -> meta of one partition, write-through to TransactionalState (loaded once)."""

    def __init__(self, state: Any, stream: str, partition: Any, writer: MetaWriter | None = None) -> None:
        self.state = state
        self.base = tx.spout_partition_path(stream, partition)
        self.stream = stream
        self.partition = partition
        self.writer = writer or MetaWriter(state, stream)
        self.metas: dict[int, Any] = {}
        for child in state.children(self.base):
            if child.isdigit():
                stored = state.get(f"{self.base}/{child}")
                if isinstance(stored, dict) and "meta" in stored:
                    self.metas[int(child)] = stored["meta"]

    def get(self, txid: int) -> tuple[bool, Any]:
        if txid in self.metas:
            return True, self.metas[txid]
        return False, None

    def last_before(self, txid: int) -> Any:
        """The newest meta below ``txid`` that emitted something (skipped txids store None)."""
        below = [t for t in self.metas if t < txid and self.metas[t] is not None]
        return self.metas[max(below)] if below else None

    def has_after(self, txid: int) -> bool:
        return any(t > txid for t in self.metas)

    def put(self, txid: int, meta: Any) -> None:
        self.state.set_new(tx.spout_meta_path(self.stream, self.partition, txid), {"meta": meta})
        self.metas[txid] = meta

    def put_behind(self, txid: int, meta: Any, last: bool = False) -> Future | None:
        """Like :meth:`put`, the write started on the writer; wait with :meth:`settle` before the
        batch's coordination tuples leave. Until then the meta is known here (this task's later
        emits see it) but may not be stored. ``last``: nothing is emitted before the wait, so
        the write is done here and now (a failure raises, the meta then not kept)."""
        path = tx.spout_meta_path(self.stream, self.partition, txid)
        if self.writer.defers(last):
            meta = snapshot(path, meta)   # the writer thread must not see the spout's later changes
        future = self.writer.store(lambda: self.state.set_new(path, {"meta": meta}), now=last)
        self.metas[txid] = meta
        return future

    def settle(self, txid: int, future: Future | None) -> None:
        """Wait for :meth:`put_behind`'s write; if it failed the meta is forgotten (as a failed
        :meth:`put` leaves it) and the error raised."""
        if future is None:
            return
        try:
            future.result()
        except BaseException:
            self.metas.pop(txid, None)
            raise

    def cleanup_before(self, txid: int) -> None:
        old = [t for t in self.metas if t < txid]
        for t in old:
            del self.metas[t]
        paths = [tx.spout_meta_path(self.stream, self.partition, t) for t in old]
        if paths:
            delete = self.state.delete

            def prune() -> None:
                for path in paths:
                    delete(path)
            self.writer.prune(prune)


class SpoutSource:
    """Base of the per-task drivers; ``emit`` runs the user's batch emission."""

    def __init__(self, spout: Any, stream: str) -> None:
        self.spout = spout
        self.stream = stream
        self.partitions: list[Any] = []
        self.metas: dict[int, RotatingMetas] = {}
        self.state: Any = None
        self.writer: MetaWriter | None = None

    def prepare(self, conf: Mapping[str, Any], context: Any, state: Any, task_index: int, num_tasks: int) -> None:
        self.state = state
        self.writer = MetaWriter(state, f"{self.stream}-{task_index}")
        self.spout.initialize(conf, context)
        if hasattr(self.spout, "partitions") and not isinstance(self.spout, BatchSpout):
            every = list(self.spout.partitions())
            self.partitions = [p for i, p in enumerate(every) if i % num_tasks == task_index]
            for i, p in enumerate(self.partitions):
                self.metas[i] = RotatingMetas(state, self.stream, p, self.writer)

    def emit(self, txid: int, attempt: int, collector: Any) -> None:
        raise NotImplementedError

    def commit(self, txid: int, attempt: int) -> bool:
        return True

    def success(self, txid: int) -> None:
        for metas in self.metas.values():
            metas.cleanup_before(txid)
        self.spout.ack(txid)

    def close(self) -> None:
        try:
            self.spout.close()
        finally:
            if self.writer is not None:
                self.writer.close()


class BatchSource(SpoutSource):
    def emit(self, txid: int, attempt: int, collector: Any) -> None:
        self.spout.emit_batch(txid, collector)


class PartitionedSource(SpoutSource):
    def emit(self, txid: int, attempt: int, collector: Any) -> None:
        stores: list[tuple[RotatingMetas, Future | None]] = []
        last_index = len(self.partitions) - 1
        try:
            for i, partition in enumerate(self.partitions):
                metas = self.metas[i]
                found, meta = metas.get(txid)
                if found:
                    if meta is not None:
                        self.spout.emit_batch(txid, collector, partition, meta)
                elif metas.has_after(txid):
                    # Storm's RotatingTransactionalState rule: a later txid already took the data
                    # after last_before(txid) (this txid failed before its meta was stored, e.g. a
                    # Function fused after the spout raised); emitting it again here would count
                    # that data twice. This txid stays empty, forever.
                    stores.append((metas, metas.put_behind(txid, None, last=i == last_index)))
                else:
                    meta = self.spout.emit_new_batch(txid, collector, partition, metas.last_before(txid))
                    stores.append((metas, metas.put_behind(txid, meta, last=i == last_index)))
        except BaseException:
            # A later partition raised: what earlier ones emitted is stored all the same, as before.
            _settle_all(txid, stores, quiet=True)
            raise
        _settle_all(txid, stores)   # every meta stored before the coordination tuples leave this task


def _settle_all(txid: int, stores: list[tuple[RotatingMetas, Future | None]], quiet: bool = False) -> None:
    failed: BaseException | None = None
    for metas, future in stores:
        try:
            metas.settle(txid, future)
        except BaseException as exc:
            failed = failed or exc
    if failed is not None and not quiet:
        raise failed


class OpaqueSource(SpoutSource):
    def __init__(self, spout: Any, stream: str) -> None:
        super().__init__(spout, stream)
        self.cached: dict[int, tuple[int, dict[int, Any]]] = {}   # txid -> (attempt, {partition index: meta})

    def emit(self, txid: int, attempt: int, collector: Any) -> None:
        for later in [t for t in self.cached if t >= txid]:
            del self.cached[later]  # the coordinator replays every later txid too
        below = [t for t in self.cached if t < txid]
        prev = self.cached[max(below)][1] if below else {}
        emitted: dict[int, Any] = {}
        for i, partition in enumerate(self.partitions):
            last = prev[i] if i in prev else self.metas[i].last_before(txid)
            emitted[i] = self.spout.emit_batch(txid, collector, partition, last)
        self.cached[txid] = (attempt, emitted)

    def commit(self, txid: int, attempt: int) -> bool:
        entry = self.cached.get(txid)
        if entry is None or entry[0] != attempt:
            return False
        for i, meta in entry[1].items():
            self.metas[i].put(txid, meta)
        for old in [t for t in self.cached if t <= txid]:
            del self.cached[old]
        return True


def make_source(spout: Any, kind: str, stream: str) -> SpoutSource:
    return {"batch": BatchSource, "partitioned": PartitionedSource, "opaque": OpaqueSource}[kind](spout, stream)
