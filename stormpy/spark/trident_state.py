"""SparkState: a Trident state that writes each (txid, partition) batch into Spark, exactly once.

Used as ``stream.partition_persist(SparkState(path=...), fields, SparkState.updater())``. Each
batch of a state partition becomes one DataFrame (rows -> Arrow -> Spark through the worker's
long-lived SparkSession, ``stormpy.spark.session`` / ``convert``) written into a hidden staging
directory, and at the batch's Trident commit its files are renamed to names made of the
namespace, partition and txid (``stormpy.spark.idempotent``): a replayed txid replaces what an
earlier attempt published instead of adding to it. So ``spark.read.parquet(path)`` holds every
input row exactly once, even when a worker dies between Spark's write and the commit.

Overlap: the write (the slow part: pyarrow's C++ writer, or a Spark job on the JVM's threads)
starts on a writer thread as soon as the batch is complete in this task (``batch_complete``),
while the executor goes on with later batches; the commit waits for that write, then publishes.
At most ``max_inflight`` writes are running at once, side by side (``spark.sink.max.inflight.batches``,
default 2; 0 = write at the commit): a Spark job's fixed cost (~0.1-0.2 s) is then paid for two
batches at a time. A failed write fails exactly its batch's commit, which Trident replays as a
new attempt.

Commit groups: batches that become ready while every writer is busy wait together, and the next
free writer writes up to ``spark.state.max.batches.per.write`` of them in one Spark job, into one
staging directory split by txid (``partitionBy`` on a txid column that never reaches the output).
Each txid is still published on its own at its own commit, so a replay still replaces exactly its
txid, and a commit still waits until its rows are written. Nothing is held back to make a group:
a group forms only from batches that would otherwise queue, so the latency bound is the time of
the write in front of them. The Arrow writer has no per-job cost and writes a group's batches one
after the other.

Who writes: pyarrow (``stormpy.spark.arrow_writer``, no Spark job and no JVM) for Parquet/JSON
on a local path with the embedded Spark, else Spark (``spark.state.writer``). Through Spark
Connect the executors write the staging directory and this worker publishes it with renames on
its own mount of the output. How a Spark job gets its rows (``spark.state.handover``): through
Spark Connect or a cluster master, with the output on a path this worker writes (a local disk or
a shared mount, which every executor must see anyway), the worker writes the batch or group as an
uncompressed Parquet file into a hidden ``<staging>-in`` directory and the job reads that file
(``spark.read.parquet``) and writes it in the requested format: the rows do not travel inside
the job's plan (Spark Connect's ``LocalRelation`` costs the server's driver ~4 us a row). The
hand-over directory is removed once the job is done, whether it succeeded or not; one left by a
dead worker goes with the partition's other orphaned staging directories. Columns whose
Parquet round trip Spark reads differently (``arrow_writer.handover_compatible``) keep the
Arrow hand-over.

The test hook ``spark.state.test.die.after.write: <txid>`` makes the first task that publishes
that txid SIGKILL its own worker after the renames and before the commit completes (once per
output: a marker file under ``_stormpy_state/``). Tests only.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from stormpy import config as cfg
from stormpy.extras import require
from stormpy.spark.writer import STAGED_JOB_OPTIONS
from stormpy.trident.state.contract import State, StateFactory, StateUpdater

log = logging.getLogger(__name__)

FORMATS = ("parquet", "json", "csv", "orc")
DIE_AFTER_WRITE_KEY = cfg.SPARK_STATE_TEST_DIE_AFTER_WRITE.name
MAX_INFLIGHT_KEY = cfg.SPARK_SINK_MAX_INFLIGHT_BATCHES.name
MAX_PER_WRITE_KEY = cfg.SPARK_STATE_MAX_BATCHES_PER_WRITE.name
TXID_COLUMN = "stormpy_txid"   # splits a commit group's staging directory; never published
#: Hadoop committer settings of SparkState's own Spark jobs (``writer.STAGED_JOB_OPTIONS``).
JOB_OPTIONS = STAGED_JOB_OPTIONS
_WAIT_LOG_SECS = 30.0


class SparkState(StateFactory):
    """Where and how a Trident stream's batches land in Spark (a path or a table).

    ``namespace`` (default: the topology name) goes into every file name, so several states or
    topologies can share one output; txids must only grow within a namespace (docs/concepts/trident-state.md).
    """

    def __init__(self, path: str | None = None, format: str = "parquet", partition_by: Sequence[str] | str | None = None,
                 table: str | None = None, *, options: Mapping[str, Any] | None = None, schema: Any = None,
                 namespace: str | None = None, max_inflight: int | None = None) -> None:
        if (path is None) == (table is None):
            raise ValueError("SparkState needs exactly one of path=... or table=...")
        if format not in FORMATS:
            raise ValueError(f"SparkState format must be one of {', '.join(FORMATS)}, got {format!r}")
        if max_inflight is not None and max_inflight < 0:
            raise ValueError(f"SparkState max_inflight must be >= 0, got {max_inflight}")
        require("spark", "SparkState")      # one line naming the extra, at the topology's import
        if path is not None:
            from stormpy.spark.idempotent import check_atomic_rename
            check_atomic_rename(path)
        self.path = path
        self.table = table
        self.format = format
        self.partition_by = [partition_by] if isinstance(partition_by, str) else list(partition_by or [])
        self.options = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (options or {}).items()}
        self.schema = schema
        self.namespace = namespace
        self.max_inflight = max_inflight

    @staticmethod
    def updater() -> "SparkStateUpdater":
        """The updater ``partition_persist`` needs with a SparkState."""
        return SparkStateUpdater()

    def make_state(self, conf: Any, context: Any, partition_index: int, num_partitions: int) -> "SparkBatchState":
        return SparkBatchState(self, dict(conf or {}), partition_index)

    def describe(self) -> str:
        return f"table {self.table}" if self.table else f"{self.format} at {self.path}"

    def placement(self) -> str | None:
        """"host" for a path without a scheme or on ``file:`` (one host's disk unless every host
        mounts it), None for HDFS and other shared filesystems, and for tables."""
        if self.path is None:
            return None
        scheme = self.path.split(":", 1)[0].lower() if ":" in self.path.split("/", 1)[0] else ""
        return "host" if scheme in ("", "file") else None

    def read(self, spark: Any) -> Any:
        """The committed output as a DataFrame (what any Spark reader sees)."""
        if self.table:
            return spark.table(self.table)
        reader = spark.read.format(self.format).options(**self.options)
        return reader.load(self.path)


class SparkStateUpdater(StateUpdater):
    """Hands a partition's batch to its SparkBatchState: early (background write), then at commit."""

    def batch_complete(self, state: "SparkBatchState", txid: int, tuples: list) -> None:
        state.stage(txid, tuples)

    def update_state(self, state: "SparkBatchState", tuples: list, collector: Any) -> None:
        state.write(tuples)


class _Staged:
    """One attempt's write: the future of its staging directory (None: empty batch)."""

    __slots__ = ("txid", "tuples", "rows", "count", "future", "group", "table")

    def __init__(self, txid: int, tuples: list) -> None:
        self.txid = txid
        self.tuples = tuples
        self.rows = list(tuples)   # the executor may reuse ``tuples``; the writer reads this copy
        self.count = len(tuples)
        self.future: Future = Future()
        self.group: _Group | None = None
        self.table: Future | None = None   # its Arrow table, converted ahead of its write (``_prepare``)


class _Group:
    """Batches one writer task writes together (a commit group); one member when writers are free."""

    __slots__ = ("members", "started", "future", "root", "left")

    def __init__(self, first: _Staged) -> None:
        self.members = [first]
        self.started = False
        self.future: Future | None = None   # the pool task; done when every member's write is
        self.root: str | None = None        # the shared staging directory of a multi-batch Spark job
        self.left = 1                       # members not yet published or discarded


class SparkBatchState(State):
    """One partition of a SparkState inside a task; every method runs on its executor thread,
    the writes on up to ``max_inflight`` writer threads (conversions one at a time, see ``_spark_write``)."""

    def __init__(self, factory: SparkState, conf: dict[str, Any], partition: int) -> None:
        self.factory = factory
        self.conf = conf
        self.partition = partition
        self.namespace = factory.namespace or str(conf.get(cfg.TOPOLOGY_NAME.name) or "trident")
        inflight = factory.max_inflight if factory.max_inflight is not None else conf.get(MAX_INFLIGHT_KEY)
        self.max_inflight = 2 if inflight is None else int(inflight)
        per_write = conf.get(MAX_PER_WRITE_KEY)
        self.max_per_write = max(1, 4 if per_write is None else int(per_write))
        die = conf.get(DIE_AFTER_WRITE_KEY)
        self.die_after_txid = None if die in (None, "", False) else int(die)
        self._pool: ThreadPoolExecutor | None = None
        self._prep: ThreadPoolExecutor | None = None   # converts batches while a Spark job runs
        self._staged: dict[int, _Staged] = {}
        #: discarded attempts whose write still runs (``_discard_when_done``): close waits for them
        self._discarding = 0
        self._discarded = threading.Condition()
        self._groups: list[_Group] = []       # handed to the pool and not finished
        self._open: _Group | None = None      # queued behind busy writers: later batches may join it
        self._group_lock = threading.Lock()   # ``started``/``members``/``left`` between executor and writers
        self._txid: int | None = None
        self._lock = threading.Lock()   # guards the lazily made Spark objects below
        self._spark: Any = None
        self._converter: Any = None     # made from the first non-empty batch's fields
        self._handover: Any = None
        self._batches: Any = None       # idempotent.BatchFiles, made with the session
        self._root: str | None = None
        self._arrow: bool | None = None  # pyarrow writes the files (no Spark job); decided at the first batch
        self._arrow_checked = False
        self._parquet: bool | None = None  # Spark jobs read staged Parquet (``_parquet_handover``)
        self._convert_lock = threading.Lock()   # one conversion at a time; writes run side by side
        self._running = 0                     # pool tasks writing now (under ``_group_lock``)
        # writes = Spark jobs (or Arrow group writes); grouped = batches written by them;
        # max_inflight_seen = most writes that ran at once; prepared = batches converted ahead of their write
        self.stats = {"batches": 0, "rows": 0, "replaced_batches": 0, "spark_secs_last": 0.0,
                      "writes": 0, "grouped": 0, "largest_group": 0, "max_inflight_seen": 0, "prepared": 0}

    # ----------------------------------------------------------------- the State contract
    def begin_commit(self, txid: int) -> None:
        self._txid = txid

    def commit(self, txid: int) -> None:
        self._txid = None

    def close(self) -> None:
        """Wait briefly for running writes (their staging dirs are hidden either way), release Spark."""
        pool, self._pool = self._pool, None
        stats = self.stats
        if stats["writes"]:
            log.info("SparkState %s p%d: %d batches committed; %d written in %d writes (%.1f a write, largest %d), "
                     "at most %d writes at once", self.namespace, self.partition, stats["batches"], stats["grouped"],
                     stats["writes"], stats["grouped"] / stats["writes"], stats["largest_group"],
                     stats["max_inflight_seen"])
        for staged in list(self._staged.values()):
            try:
                staged.future.exception(timeout=30)
            except FutureTimeout:
                log.warning("SparkState %s p%d: txid %d still being written at close", self.namespace,
                            self.partition, staged.txid)
        with self._discarded:   # a discarded attempt's directory goes when its write ends
            if not self._discarded.wait_for(lambda: self._discarding == 0, timeout=30):
                log.warning("SparkState %s p%d: %d discarded batches still being written at close",
                            self.namespace, self.partition, self._discarding)
        self._staged.clear()
        self._groups.clear()
        self._open = None
        if pool is not None:
            pool.shutdown(wait=False)
        prep, self._prep = self._prep, None
        if prep is not None:
            prep.shutdown(wait=False)
        if self._spark is not None:
            from stormpy.spark.session import release_session
            self._spark = None
            release_session("SparkState closed")

    # ----------------------------------------------------------------- batches
    def stage(self, txid: int, tuples: list) -> None:
        """The batch is complete in this task: start its Spark write now (bounded), publish at commit."""
        if self.max_inflight == 0:
            return
        self._drop(txid)   # an earlier attempt of the same txid that never committed
        staged = _Staged(txid, tuples)
        self._enqueue(staged)
        self._staged[txid] = staged

    def write(self, tuples: list) -> None:
        """At the commit: wait for this batch's write (or do it now), then publish it idempotently."""
        if self._txid is None:
            raise RuntimeError("SparkState.write() outside a commit")
        txid = self._txid
        for older in [t for t in self._staged if t < txid]:   # attempts that never reached a commit here
            self._discard_when_done(self._staged.pop(older))
        staged = self._staged.pop(txid, None)
        if staged is not None and (staged.tuples is not tuples or staged.count != len(tuples)):
            self._discard_when_done(staged)   # the tuples changed after staging: write them again
            staged = None
        if staged is None:
            staged = _Staged(txid, tuples)
            self._enqueue(staged)
        staging = self._result(staged)
        if self._batches is None:
            return   # an empty batch into a table that does not exist yet
        started = time.monotonic()
        try:
            published = self._batches.publish(txid, staging)
        finally:
            self._release(staged)
        if self.factory.table and published:
            self._refresh_table()
        self.stats["batches"] += 1
        self.stats["rows"] += len(tuples)
        log.debug("SparkState %s p%d: txid %d published %d files (%d rows) in %.3f s", self.namespace,
                  self.partition, txid, len(published), len(tuples), time.monotonic() - started)
        if self.die_after_txid is not None and txid == self.die_after_txid:
            self._test_die_after_write(txid)

    def _result(self, staged: _Staged) -> str | None:
        waited = time.monotonic()
        while True:
            try:
                return staged.future.result(timeout=_WAIT_LOG_SECS)
            except FutureTimeout:
                log.warning("SparkState %s p%d: commit of txid %d waiting for Spark for %.0f s", self.namespace,
                            self.partition, staged.txid, time.monotonic() - waited)

    def _enqueue(self, staged: _Staged) -> None:
        """Join the group queued behind busy writers, or start a group of its own (bounded)."""
        self._prepare(staged)
        with self._group_lock:
            group = self._open
            if (group is not None and not group.started and len(group.members) < self.max_per_write
                    and all(m.txid != staged.txid for m in group.members)):
                group.members.append(staged)
                group.left += 1
                staged.group = group
                return
        self._wait_for_room()
        group = _Group(staged)
        staged.group = group
        with self._group_lock:
            self._open = group if self.max_per_write > 1 else None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=max(1, self.max_inflight),
                                            thread_name_prefix=f"spark-state-p{self.partition}")
        self._groups.append(group)
        group.future = self._pool.submit(self._write_group, group)

    def _prepare(self, staged: _Staged) -> None:
        """Convert the batch to Arrow on the preparing thread now, while the Spark job in front
        of it runs, instead of at the start of its own job: the conversion (Python) leaves the
        writer's critical path. Only once the Parquet hand-over is chosen (``_parquet_handover``);
        the first batches convert in their write, as before."""
        if not (self._parquet and self._arrow is False and staged.rows):
            return
        if self._prep is None:
            self._prep = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"spark-state-prep-p{self.partition}")
        staged.table = self._prep.submit(self._convert, staged.rows)
        self.stats["prepared"] += 1

    def _convert(self, rows: list) -> Any:
        with self._convert_lock:
            return self._converter.to_table([t.values for t in rows])

    def _wait_for_room(self) -> None:
        """At most ``max_inflight`` groups being written and one queued behind them (which later
        batches join); finished writes only hold hidden files until their commits."""
        room = self.max_inflight + (1 if self.max_per_write > 1 else 0)
        started = time.monotonic()
        while True:
            self._groups = [g for g in self._groups if not g.future.done()]
            if len(self._groups) < room:
                return
            try:
                self._groups[0].future.exception(timeout=_WAIT_LOG_SECS)
            except FutureTimeout:
                log.warning("SparkState %s p%d: %d writes in flight for %.0f s; waiting for Spark",
                            self.namespace, self.partition, len(self._groups), time.monotonic() - started)

    def _release(self, staged: _Staged) -> None:
        """A member is published or discarded: the last one removes its group's staging directory."""
        group = staged.group
        if group is None:
            return
        staged.group = None
        with self._group_lock:
            group.left -= 1
            last = group.left == 0
        if last and group.root is not None and self._batches is not None:
            self._batches.discard(group.root)

    def _drop(self, txid: int) -> None:
        staged = self._staged.pop(txid, None)
        if staged is not None:
            self._discard_when_done(staged)

    def _discard_when_done(self, staged: _Staged) -> None:
        """Remove an attempt's staging directory once its write ends (now, if it has): ``close``
        waits for such writes, so a closed state leaves no directory of its own behind."""
        def discard(future: Future) -> None:
            try:
                staging = future.result()
            except BaseException:  # noqa: BLE001 - a failed write left nothing to clean up here
                staging = None
            try:
                if staging is not None and self._batches is not None:
                    self._batches.discard(staging)
                self._release(staged)
            finally:
                with self._discarded:
                    self._discarding -= 1
                    self._discarded.notify_all()
        with self._discarded:
            self._discarding += 1
        staged.future.add_done_callback(discard)

    # ----------------------------------------------------------------- writer thread
    def _write_group(self, group: _Group) -> None:
        """A pool task: write the group's batches (one Spark job for several when Spark writes)."""
        with self._group_lock:
            group.started = True
            members = list(group.members)
            if self._open is group:
                self._open = None
            self._running += 1
            stats = self.stats
            stats["writes"] += 1
            stats["grouped"] += len(members)
            stats["largest_group"] = max(stats["largest_group"], len(members))
            stats["max_inflight_seen"] = max(stats["max_inflight_seen"], self._running)
        began = time.monotonic()
        try:
            if len(members) == 1:
                first = members[0]
                prepared = first.table.result() if first.table is not None else None
                results = {first.txid: self._spark_write(first.rows, first.txid, prepared)}
            else:
                results = self._write_together(group, members)
        except BaseException as exc:  # noqa: BLE001 - each member's commit raises it
            for member in members:
                member.future.set_exception(exc)
            return
        finally:
            with self._group_lock:
                self._running -= 1
        log.debug("SparkState %s p%d: txids %s written in %.3f s", self.namespace, self.partition,
                  [m.txid for m in members], time.monotonic() - began)
        for member in members:
            member.future.set_result(results[member.txid])

    def _write_together(self, group: _Group, members: list[_Staged]) -> dict[int, str | None]:
        """Several batches: Spark writes them in one job, split by a txid column into one staging
        directory per txid; pyarrow (no per-job cost) writes them one after the other.

        The group is handed to Spark as ONE Arrow table (the batches' tables with the txid column
        appended, concatenated): one ``createDataFrame`` and one write, so through Spark Connect
        the group costs one plan and one job instead of a union of one relation per batch.
        """
        with self._convert_lock:
            if self._arrow is None:
                self._arrow = self._choose_arrow()
        if self._arrow:
            return {m.txid: self._spark_write(m.rows, m.txid) for m in members}
        spark = self._ensure_spark()
        started = time.monotonic()
        # tables converted ahead (``_prepare``), fetched before taking the lock their thread needs
        prepared = {m.txid: m.table.result() for m in members if m.table is not None}
        with self._convert_lock:
            full = [m for m in members if m.rows]
            if not full:
                self._ensure_files(None)
                return {m.txid: None for m in members}
            if self._converter is None:
                from stormpy.spark.convert import RowConverter, parse_schema
                self._converter = RowConverter(full[0].rows[0].fields, parse_schema(spark, self.factory.schema))
            if TXID_COLUMN in self._converter.names:
                raise ValueError(f"SparkState: a field may not be named {TXID_COLUMN!r} (it splits commit groups); "
                                 f"rename it or set {MAX_PER_WRITE_KEY}: 1")
            table, schema = self._group_table(full, prepared)
            df = None if self._parquet_handover(table) else self._dataframe(spark, table, schema)
            self._ensure_files(df)
            group.root = self._batches.new_staging(full[0].txid)
        handed = None
        try:
            if df is None:
                df, handed = self._handed_over(spark, table, schema, group.root)
            if not self.factory.partition_by:
                df = df.coalesce(1)   # one file per batch, as for a single batch
            writer = df.write.format(self.factory.format).mode("error").partitionBy(TXID_COLUMN,
                                                                                     *self.factory.partition_by)
            writer = writer.options(**{**JOB_OPTIONS, **self.factory.options})
            writer.save(self._batches.staging_uri(group.root))
        except BaseException:
            self._batches.discard(group.root)
            raise
        finally:
            if handed is not None:
                self._batches.discard(handed)
        self.stats["spark_secs_last"] = time.monotonic() - started
        return {m.txid: f"{group.root}/{TXID_COLUMN}={m.txid}" if m.rows else None for m in members}

    def _group_table(self, members: list[_Staged], prepared: dict[int, Any]) -> tuple[Any, Any]:
        """One Arrow table of every member's rows plus a ``TXID_COLUMN``, and its Spark schema
        (None: inferred from the table)."""
        import pyarrow as pa

        converter = self._converter
        tables = []
        for member in members:
            table = prepared.get(member.txid)
            if table is None:
                table = converter.to_table([t.values for t in member.rows])
            tables.append(table.append_column(TXID_COLUMN, pa.array([member.txid] * table.num_rows, pa.int64())))
        # the column types are fixed by the first batch that has a value; an earlier all-null
        # string column of a later-typed one is cast to the final types before concatenating
        target = tables[-1].schema
        table = pa.concat_tables([t if t.schema == target else t.cast(target) for t in tables])
        schema = converter.schema
        if schema is not None:
            from pyspark.sql.types import LongType, StructField, StructType
            schema = StructType([*schema.fields, StructField(TXID_COLUMN, LongType(), True)])
        return table, schema

    def _dataframe(self, spark: Any, table: Any, schema: Any) -> Any:
        """``table`` as a DataFrame whose rows travel with the job (the Arrow hand-over)."""
        try:
            if self._handover is not None:
                return self._handover.dataframe(table, schema)
            return spark.createDataFrame(table, schema=schema)
        except (TypeError, ValueError) as exc:
            from stormpy.spark.convert import BatchConversionError
            raise BatchConversionError(f"Spark cannot take this batch's columns "
                                       f"({', '.join(f'{f.name} {f.type}' for f in table.schema)}): {exc}") from None

    def _parquet_handover(self, table: Any) -> bool:
        """Whether Spark jobs read their rows from a staged Parquet file (``spark.state.handover``);
        decided at the first batch with rows, under ``_convert_lock``."""
        if self._parquet is None:
            from stormpy.config import SPARK_STATE_HANDOVER
            from stormpy.spark import idempotent
            from stormpy.spark.arrow_writer import choose_handover

            shared = False
            if self.factory.path is not None:
                self._ensure_files(None)
                shared = isinstance(self._batches.files, idempotent.LocalFiles)
            self._parquet = choose_handover(self.conf, SPARK_STATE_HANDOVER.name, table.schema, shared_path=shared,
                                            table=self.factory.table,
                                            who=f"SparkState {self.namespace} p{self.partition}")
        return self._parquet

    def _handed_over(self, spark: Any, table: Any, schema: Any, staging: str) -> tuple[Any, str]:
        """Write ``table`` beside ``staging`` as uncompressed Parquet (pyarrow) and return a
        DataFrame reading it, and the hand-over directory (removed by the caller after the job).

        The directory shares the staging directory's name prefix, so a task taking the
        partition over removes it with the other orphans (``BatchFiles.clean_staging``).
        """
        from stormpy.spark.arrow_writer import handover_dataframe

        handed = f"{staging}-in"
        try:
            df = handover_dataframe(spark, table, schema, self._batches.files.join(handed),
                                    self._batches.staging_uri(handed))
        except BaseException:
            self._batches.discard(handed)   # a half-written hand-over file
            raise
        return df, handed

    def _spark_write(self, rows: list, txid: int, prepared: Any = None) -> str | None:
        """Convert and write one batch into a fresh staging directory; returns it (None: no rows).

        Up to ``max_inflight`` of these run at once on the pool's threads: the conversion (Python,
        and the lazily made converter, schema and files) one at a time under ``_convert_lock``,
        the writes themselves (pyarrow's C++ or Spark's JVM, which release the GIL) side by side.
        """
        with self._convert_lock:
            if self._arrow is None:
                self._arrow = self._choose_arrow()
            arrow = self._arrow_table(rows) if self._arrow else None
        if arrow is not None:
            return self._arrow_write(arrow, txid)
        spark = self._ensure_spark()
        started = time.monotonic()
        with self._convert_lock:
            if not rows:
                self._ensure_files(None)
                return None
            converter = self._converter
            if converter is None:
                from stormpy.spark.convert import RowConverter, parse_schema
                converter = self._converter = RowConverter(rows[0].fields, parse_schema(spark, self.factory.schema))
            table = prepared if prepared is not None else converter.to_table([t.values for t in rows])
            df = None if self._parquet_handover(table) else converter.table_to_dataframe(spark, table, self._handover)
            self._ensure_files(df)
            staging = self._batches.new_staging(txid)
        handed = None
        try:
            if df is None:
                df, handed = self._handed_over(spark, table, converter.schema, staging)
            if not self.factory.partition_by:
                df = df.coalesce(1)   # one file per batch (per partition_by directory otherwise)
            writer = df.write.format(self.factory.format).mode("error")
            writer = writer.options(**{**JOB_OPTIONS, **self.factory.options})
            if self.factory.partition_by:
                writer = writer.partitionBy(*self.factory.partition_by)
            writer.save(self._batches.staging_uri(staging))
        except BaseException:
            self._batches.discard(staging)
            raise
        finally:
            if handed is not None:
                self._batches.discard(handed)
        self.stats["spark_secs_last"] = time.monotonic() - started
        return staging

    def _choose_arrow(self) -> bool:
        """Whether pyarrow writes this output's files (``spark.state.writer``; see ``arrow_writer``)."""
        from stormpy.config import SPARK_STATE_WRITER
        from stormpy.spark.arrow_writer import use_arrow_writer

        factory = self.factory
        chosen = use_arrow_writer(self.conf, SPARK_STATE_WRITER.name, fmt=factory.format, path=factory.path,
                                  options=factory.options, table=factory.table)
        if chosen and isinstance(factory.schema, str):
            # a DDL schema is parsed by Spark's own parser: that needs the JVM anyway
            chosen = False
        log.info("SparkState %s p%d: batches written by %s", self.namespace, self.partition,
                 "pyarrow (no Spark job per batch)" if chosen else "Spark")
        return chosen

    def _arrow_table(self, rows: list) -> Any:
        """The batch as an Arrow table for the Arrow writer, or None: Spark writes it (the first
        batch's columns may turn the output over to Spark for good, ``self._arrow``). Called
        under ``_convert_lock``; an empty batch is an empty table."""
        from stormpy.spark.arrow_writer import arrow_compatible
        from stormpy.spark.convert import RowConverter

        self._ensure_files(None)   # a local path (use_arrow_writer): plain renames, no Spark
        if not rows:
            import pyarrow as pa
            return pa.table({})
        if self._converter is None:
            self._converter = RowConverter(rows[0].fields, self.factory.schema)
        table = self._converter.to_table([t.values for t in rows])
        if not self._arrow_checked:   # the first batch with rows fixes the column types
            self._arrow_checked = True
            unfit = arrow_compatible(table.schema, self.factory.format)
            if unfit is not None:
                log.info("SparkState %s p%d: writing through Spark instead of pyarrow: %s", self.namespace,
                         self.partition, unfit)
                self._arrow = False
                return None
        return table

    def _arrow_write(self, table: Any, txid: int) -> str | None:
        """Write ``table`` into a fresh staging directory with pyarrow (None: an empty batch)."""
        from stormpy.spark.arrow_writer import write_table

        if table.num_rows == 0:
            return None
        started = time.monotonic()
        staging = self._batches.new_staging(txid)
        try:
            write_table(table, self._batches.files.join(staging), self.factory.format, self.factory.partition_by,
                        self.factory.options)
        except BaseException:
            self._batches.discard(staging)
            raise
        self.stats["spark_secs_last"] = time.monotonic() - started
        return staging

    def _ensure_spark(self) -> Any:
        with self._lock:
            if self._spark is None:
                from stormpy.spark.convert import ArrowHandover
                from stormpy.spark.session import acquire_session

                spark = acquire_session(self.conf)
                self._spark = spark
                self._handover = ArrowHandover(spark)
            return self._spark

    def _ensure_files(self, df: Any) -> None:
        """The output's BatchFiles; a missing table is created from ``df``'s columns (None: not yet).

        Through Spark Connect this process has no JVM to rename files with, so the output must be
        a path this worker sees as well as Spark's executors (one machine, or a shared mount): the
        executors write the staging directory, this worker publishes it with plain renames.
        """
        if self._batches is not None:
            return
        from stormpy.spark import idempotent

        root = self.factory.path or self._table_location(self._spark, df)
        if root is None:
            return
        self._root = root
        if getattr(self._spark, "_jvm", None) is None:
            if "://" in root and not root.startswith("file:"):
                raise RuntimeError(f"SparkState through Spark Connect publishes with renames on this worker's "
                                   f"filesystem, so {root!r} must be a local or shared-mount path, not a remote URL")
            files: Any = idempotent.local_files(root)
        else:
            files = idempotent.files_for(self._spark, root)
        batches = idempotent.BatchFiles(files, self.namespace, self.partition)
        batches.clean_staging()
        self._batches = batches

    def _table_location(self, spark: Any, df: Any) -> str | None:
        """The table's directory, creating the table (empty, with the batch's columns) when missing."""
        table = self.factory.table
        if not spark.catalog.tableExists(table):
            if df is None:
                return None   # an empty batch before the table exists: nothing to publish or replace
            writer = df.limit(0).write.format(self.factory.format)
            if self.factory.partition_by:
                writer = writer.partitionBy(*self.factory.partition_by)
            try:
                writer.saveAsTable(table)
            except Exception:  # noqa: BLE001 - another task created it first
                if not spark.catalog.tableExists(table):
                    raise
        for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect():
            if row[0] == "Location":
                return str(row[1])
        raise RuntimeError(f"SparkState: table {table!r} has no location (is it a view?)")

    def _refresh_table(self) -> None:
        """Tell the catalog about the new files (and partition directories) of a table."""
        spark, table = self._spark, self.factory.table
        if self.factory.partition_by:
            spark.sql(f"ALTER TABLE {table} RECOVER PARTITIONS")
        spark.catalog.refreshTable(table)

    # ----------------------------------------------------------------- test hook
    def _test_die_after_write(self, txid: int) -> None:
        marker = f"{self._root.rstrip('/')}/_stormpy_state/test-died-{self._batches.ns}-t{txid}"
        if "://" in marker or marker.startswith("file:"):
            return
        # written aside, then linked: the test reads the pid as soon as the marker exists, and the
        # link fails if another partition's worker got there first
        aside = f"{marker}.{os.getpid()}-p{self.partition}.tmp"   # partitions of one worker: one file each
        with open(aside, "w") as out:
            out.write(f"p{self.partition} pid {os.getpid()}\n")
        try:
            os.link(aside, marker)
        except FileExistsError:
            return
        finally:
            os.unlink(aside)
        log.warning("TEST HOOK %s: txid %d published by partition %d; SIGKILLing this worker before the commit",
                    DIE_AFTER_WRITE_KEY, txid, self.partition)
        os.kill(os.getpid(), signal.SIGKILL)
