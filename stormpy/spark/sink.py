"""``SparkSinkBolt``: a batching bolt that hands each batch of tuples to PySpark as a DataFrame.

Runs on its executor's thread like every bolt. Tuples collect per input stream until a batch
holds ``spark.sink.batch.size`` rows or its first tuple is ``spark.sink.batch.secs`` old
(checked by the executor's timer), and at shutdown; then the batch becomes one Arrow table,
one DataFrame, and one call of ``handle_batch(spark, df, batch_id)`` — by default the
built-in writer (``spark.sink.format`` to ``spark.sink.path``, or ``spark.sink.table``).

Overlap (``spark.sink.max.inflight.batches``, default 2): a full batch is handed to the task's
writer thread (``stormpy.spark.inflight``), which converts it and calls ``handle_batch`` while
the executor goes on processing tuples; the JVM does the write on its own threads. Batches are
written one at a time, in order. When that many batches are in flight the executor waits for
the oldest (backpressure: its input queue fills, so upstream slows down and memory stays
bounded). With 0 the batch is written on the executor thread, as before.

Guarantees: a batch's tuples are acked only after ITS ``handle_batch`` returned; if conversion,
Spark or the hook raises, all of them are failed, so a replaying spout sends them again, and
the error is reported as the component's error. Acks, fails, metrics and error reports all
happen on the executor thread: the writer thread only runs the write, and the executor settles
finished batches when the writer wakes it (``call_soon``), at each new batch and on its timer.
A batch is never half-acked, and a bad batch never kills the task. At shutdown the pending
batches are written and every write in flight is waited for before ``close`` returns. With
overlap ``handle_batch`` runs on the writer thread: it must not emit.

Through Spark Connect or a cluster master (``spark.remote``, ``spark.master: spark://...``), the
built-in writer appending to a path this worker sees hands each batch to Spark as a staged
Parquet file (``stormpy.spark.writer.write_handed_over``, ``spark.state.handover``), not as
Arrow rows inside the job's plan; a ``handle_batch`` or ``write`` override still gets a
DataFrame of Arrow rows. Such a Spark job costs ~0.15-0.3 s whatever its rows, so while the
writer is busy with one, the batch being filled keeps growing up to
``spark.state.max.batches.per.write`` batches and the next job writes all of it (whole batches
of ``spark.sink.batch.size`` rows; its tuples are still acked only after that job returned).

Rows as they arrive (``make_driver``): the plain sink takes whole received batches of raw
messages and keeps them in its batches as they are, one ``list.extend`` per run of one source
task and stream: no Tuple object, no held-tuple entry and no Python call per row; a written
batch is acked in one call (``ack_messages``: one pass over its tree edges). A subclass that
overrides ``process``, ``group_key`` or ``process_batch`` gets a Tuple per row as before.

Throughput and ``topology.max.spout.pending``: the spout can start the next batch only while
the current one is being written if its pending cap leaves room for more than one batch, and
every tuple held in a batch is a tuple tree the spout and the acker track (more memory touched
per tuple). So the cap should be a little over one batch per sink task (1.25-2x
``spark.sink.batch.size`` x sink tasks / spout tasks); below one batch a batch only ever closes
by ``spark.sink.batch.secs``. Measured with ``benchmarks/spark_sink.py --topology-only``.

``batch_id`` is an int that increases by one with every batch this task hands over, failed
attempts included (an id is never reused within a task's life). The transactional layer will
pass its txid in the same place.
"""
from __future__ import annotations

import logging
import time
import traceback
from operator import itemgetter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from stormpy import config as cfg
from stormpy.config import ConfigError
from stormpy.spark.arrow_writer import arrow_compatible, choose_handover, use_arrow_writer
from stormpy.spark.convert import ArrowHandover, BatchConversionError, RowConverter, parse_schema
from stormpy.spark.inflight import BackgroundWriter, InFlight
from stormpy.spark.session import acquire_session, release_session
from stormpy.spark.settings import SinkSettings, sink_settings
from stormpy.spark.writer import handover_directory, write_arrow_batch, write_batch, write_handed_over
from stormpy.api.component import BatchingBolt
from stormpy.api.tuple import Tuple
from stormpy.streams import SYSTEM_COMPONENT, TICK

log = logging.getLogger(__name__)

_STREAM = itemgetter(0)     # a raw message's stream
_SOURCE = itemgetter(1)     # ... and source task
_UNKNOWN = object()

# Attributes a subclass (or its initialize, before calling ours) may set; config keys win.
_SETTING_ATTRS = ("batch_size", "secs_between_batches", "format", "path", "mode", "partition_by",
                  "table", "options", "schema", "max_inflight_batches")
#: At shutdown, how long the sink waits for its writes in flight before failing their tuples.
DRAIN_SECS = 120.0


class SinkBatchError(RuntimeError):
    """A batch that was not handed to Spark; its message names the task, batch and cause."""


class SparkSinkBolt(BatchingBolt):
    """Writes its input tuples to Spark in batches; subclass it to configure or add ``handle_batch``.

    Class attributes (each overridden by the ``spark.sink.*`` config key of the same meaning):
    ``format`` (parquet/json/csv/orc), ``path``, ``mode`` (append), ``partition_by``,
    ``table``, ``options`` (writer options), ``schema`` (DDL string or StructType),
    ``batch_size``, ``secs_between_batches`` and ``max_inflight_batches``.
    """

    outputs: Any = None
    batch_size: int | None = 10000
    secs_between_batches: float = 5
    format: str | None = None
    path: str | None = None
    mode: str | None = None
    partition_by: Sequence[str] | str | None = None
    table: str | None = None
    options: Mapping[str, Any] | None = None
    schema: Any = None
    max_inflight_batches: int = 2
    _raw = False   # batches hold raw messages (make_driver), not Tuples

    # ------------------------------------------------------------ lifecycle (executor thread)
    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        """Read and validate the sink's settings; Spark itself starts with the first batch."""
        self.sink: SinkSettings = sink_settings(stormconf, self._own_settings())
        if not self.sink.has_writer and type(self).handle_batch is SparkSinkBolt.handle_batch:
            raise ConfigError(f"{type(self).__name__} has nowhere to write: set spark.sink.path (with "
                              "spark.sink.format) or spark.sink.table, or override handle_batch()")
        self.batch_size = self.sink.batch_size
        self.secs_between_batches = self.sink.batch_secs
        self._stormconf = dict(stormconf)
        self._context = context
        self._task_id = getattr(context, "task_id", None)
        self._stream_fields = self._declared_fields(context)
        self._converters: dict[Hashable, RowConverter] = {}
        self._opened: dict[Hashable, float] = {}  # batch key -> when its first tuple arrived
        self._spark: Any = None
        self._handover: ArrowHandover | None = None
        self._schema: Any = None
        self._arrow: bool | None = None   # decided at the first batch (_arrow_output)
        self._arrow_checked = False
        self._parquet_targets: dict[Hashable, str | None] = {}   # per stream: _handover_target
        # rows one write may take while the writer is busy, in batches (``_write_cap``)
        self._per_write = max(1, int(cfg.read(stormconf, cfg.SPARK_STATE_MAX_BATCHES_PER_WRITE)))
        self._abandoned: set[int] = set()   # batch ids failed when a drain timed out
        self.last_batch_id = 0
        for name in ("batches", "rows", "failed_batches", "failed_rows", "spark_secs_total", "inflight_batches",
                     "spark_session_start_secs"):  # every key exists up front: the writer thread only updates
            self.metrics.set(name, 0)
        self._writer: BackgroundWriter | None = None
        if self.sink.max_inflight_batches > 0:
            wake = self._stormpy_collector.call_soon  # the writer thread wakes the executor thread
            self._writer = BackgroundWriter(
                f"{getattr(context, 'component_id', 'sink')}-{self._task_id}", self.sink.max_inflight_batches,
                on_done=lambda: wake(self._settle_finished))
        self.logger.info("Spark sink ready: batches of %d rows or %g s to %s, %d in flight", self.sink.batch_size,
                         self.sink.batch_secs, self.sink.describe(), self.sink.max_inflight_batches)

    def _own_settings(self) -> dict[str, Any]:
        """Setting attributes this subclass or instance changed from SparkSinkBolt's defaults."""
        own: dict[str, Any] = {}
        for name in _SETTING_ATTRS:
            value = getattr(self, name)
            if value is not SparkSinkBolt.__dict__[name] and value != SparkSinkBolt.__dict__[name]:
                own[name] = value
        return own

    @staticmethod
    def _declared_fields(context: Any) -> dict[tuple[str, str], tuple[str, ...]]:
        """Declared fields of each input stream (from the topology), by (component, stream)."""
        try:
            sources = context.get_sources()
            return {(comp, stream): tuple(context.get_output_fields(stream, comp)) for comp, stream in sources}
        except (AttributeError, KeyError, TypeError):
            log.debug("context has no input stream layout; field names come from the tuples")
            return {}

    def close(self) -> None:
        """Wait for the writes in flight, then give the SparkSession back (the process's last
        sink to close stops it)."""
        # getattr: close() also runs for an instance whose initialize() raised (bad config).
        writer = getattr(self, "_writer", None)
        if writer is not None:
            self._drain()
            writer.shutdown()
        if getattr(self, "_spark", None) is not None:
            self._spark = None
            release_session(f"sink {getattr(self._context, 'component_id', '?')} task {self._task_id} closed")

    # ------------------------------------------------------------ batching
    @property
    def timer_interval_secs(self) -> float | None:  # type: ignore[override]
        """Check batch ages ten times per ``spark.sink.batch.secs`` (at most every 0.5 s).

        streamparse's BatchingBolt flushes every batch on each timer tick, so a batch opened
        just before a tick closes almost empty. The sink instead closes a batch when its first
        tuple is ``batch.secs`` old (or it is full), so time only cuts batches that are slow to
        fill, and a tuple waits at most ``batch.secs`` plus one check interval.
        """
        return max(0.01, min(0.5, float(self.secs_between_batches) / 10))

    def on_timer(self) -> None:
        """Hand over every batch whose first tuple arrived ``spark.sink.batch.secs`` ago."""
        now = time.monotonic()
        opened = self._opened
        for key in list(self._batches):
            started = opened.setdefault(key, now)  # group_key overrides open batches unseen
            if now - started >= self.secs_between_batches:
                self._run_batch(key)
        if self._writer is not None and len(self._writer):
            self._settle_finished()

    # ------------------------------------------------------------ overlap (executor thread)
    def flush_batches(self) -> None:
        """Hand over every pending batch and wait until all writes in flight have finished
        (the driver calls this before close, so the last acks go out with the final flush)."""
        super().flush_batches()
        if self._writer is not None:
            self._drain()

    def pending_tuples(self) -> list[Tuple]:
        """Tuples waiting in batches and in batches being written (failed if the task crashes)."""
        pending = super().pending_tuples()
        if self._writer is not None:
            for item in self._writer.items():
                pending.extend(item.payload[1])
        return pending

    def _run_batch(self, key: Hashable) -> None:
        """Hand the batch to the writer thread (waiting for room first), or write it here when
        ``spark.sink.max.inflight.batches`` is 0."""
        writer = self._writer
        if writer is None:
            if self._raw:
                self._run_batch_here(key)
            else:
                super()._run_batch(key)
            return
        if key not in self._batches:
            return
        writer.wait_for_room(self._settle)  # backpressure: the executor takes no tuples meanwhile
        tups = self._batches.pop(key, None)
        if not tups:
            return
        self._opened.pop(key, None)
        self.last_batch_id += 1
        batch_id = self.last_batch_id
        writer.submit(lambda: self._write_batch(key, tups, batch_id), (key, tups, batch_id))
        self.metrics.set("inflight_batches", len(writer))

    def _write_batch(self, key: Hashable, tups: list[Tuple], batch_id: int) -> float:
        """Writer thread: convert and hand the batch over (``_hand_over``); returns its seconds."""
        started = time.monotonic()
        self._hand_over(key, tups, batch_id)
        return time.monotonic() - started

    def _hand_over(self, key: Hashable, tups: list[Any], batch_id: int) -> None:
        """Convert one batch and write it: with pyarrow (no Spark job) where the built-in writer
        allows it, else as a DataFrame through ``handle_batch``. A value that does not convert
        raises SinkBatchError naming the batch."""
        rows = [m[2] for m in tups] if self._raw else [tup.values for tup in tups]
        tag = f"task{self._task_id}-batch{batch_id}"
        table = target = None
        try:
            if self._arrow_output():
                table = self._converter(key, rows[0]).to_table(rows)
                if self._arrow_fits(table):
                    write_arrow_batch(table, self.sink, tag)
                    return
            spark = self.spark()
            converter = self._converter(key, rows[0])
            if table is None:
                table = converter.to_table(rows)
            target = self._handover_target(key, spark, table)
            if target is None:
                df = converter.table_to_dataframe(spark, table, self._handover)
        except BatchConversionError as exc:
            raise SinkBatchError(f"task {self._task_id}: batch {batch_id} ({len(tups)} tuples from "
                                 f"{_stream_name(key)}) was not written, its tuples fail: {exc}") from None
        if target is not None:
            write_handed_over(spark, table, converter.schema, self.sink, target, tag)
            return
        self.handle_batch(spark, df, batch_id)

    def _handover_target(self, key: Hashable, spark: Any, table: Any) -> str | None:
        """The output directory when this stream's batches take the Parquet hand-over (the
        built-in writer appending to a path this worker sees, through Spark Connect or a cluster
        master: ``spark.state.handover``), else None; decided at the stream's first batch."""
        target = self._parquet_targets.get(key, _UNKNOWN)
        if target is _UNKNOWN:
            target = None
            cls = type(self)
            if cls.handle_batch is SparkSinkBolt.handle_batch and cls.write is SparkSinkBolt.write:
                # Only where it can apply: the key is topology-wide, and ``parquet`` set for a
                # SparkState must not fail a sink that writes a table.
                directory = handover_directory(spark, self.sink)
                if directory is not None and choose_handover(
                        self._stormconf, cfg.SPARK_STATE_HANDOVER.name, table.schema, shared_path=True,
                        table=None, who=f"Spark sink task {self._task_id} {_stream_name(key)}"):
                    target = directory
            self._parquet_targets[key] = target
        return target  # type: ignore[return-value]

    def _arrow_output(self) -> bool:
        """Whether batches go to files through pyarrow: the built-in writer (``handle_batch`` not
        overridden) appending to a local path with the embedded Spark (``spark.sink.writer``)."""
        if self._arrow is None:
            self._arrow = (type(self).handle_batch is SparkSinkBolt.handle_batch and self.sink.mode == "append"
                           and not isinstance(self.sink.schema, str)
                           and use_arrow_writer(self._stormconf, cfg.SPARK_SINK_WRITER.name, fmt=self.sink.format,
                                                path=self.sink.path, options=self.sink.options, table=self.sink.table))
            self.logger.info("Spark sink batches written by %s", "pyarrow (no Spark job per batch)" if self._arrow
                             else "Spark")
        return self._arrow

    def _arrow_fits(self, table: Any) -> bool:
        """The first batch's columns decide for good whether Spark would read Arrow's files back the same."""
        if not self._arrow_checked:
            self._arrow_checked = True
            unfit = arrow_compatible(table.schema, self.sink.format)
            if unfit is not None:
                self.logger.info("Spark sink writes through Spark instead of pyarrow: %s", unfit)
                self._arrow = False
        return bool(self._arrow)

    def _settle_finished(self) -> None:
        """Executor thread (woken by the writer, or from the timer): ack or fail finished batches.
        Never raises: it runs from the executor's queue, where an exception would end the loop."""
        writer = self._writer
        if writer is None:
            return
        try:
            self._settle(writer.pop_done())
            if self._raw and not writer.full:   # batches that grew while the writer was busy
                for key in [k for k, rows in self._batches.items() if len(rows) >= self.batch_size]:  # type: ignore[operator]
                    self._hand_over_full(key)
        except Exception as exc:  # noqa: BLE001 - reported, the executor must live
            self.logger.exception("settling finished Spark batches failed")
            self.report_error(f"settling finished Spark batches failed: {exc!r}")

    def _settle(self, done: list[InFlight]) -> None:
        for item in done:
            key, tups, batch_id = item.payload
            if batch_id in self._abandoned:   # failed at a drain that timed out: settled already
                self._abandoned.discard(batch_id)
                continue
            error = item.error
            if error is None:
                self._count_success(len(tups), item.result, batch_id)
                self._ack_batch(tups)
                continue
            self._count_failure(len(tups))
            self.logger.error("batch %d failed for %s (%d tuples): %s", batch_id, _stream_name(key), len(tups), error)
            self._fail_batch(tups)
            self.report_error("".join(traceback.format_exception(error)))
        if self._writer is not None:
            self.metrics.set("inflight_batches", len(self._writer))

    def _ack_batch(self, tups: list[Any]) -> None:
        """Ack a written batch in one call: its raw messages, or its Tuples."""
        if self._raw:
            self.ack_messages(tups)
        else:
            self.ack_many(tups)

    def _fail_batch(self, tups: list[Any]) -> None:
        if self._raw:
            for message in tups:
                self.fail_message(message)
            return
        for tup in tups:
            if not tup._done:
                self.fail(tup)

    def _drain(self) -> None:
        writer = self._writer
        assert writer is not None
        if not writer.drain(self._settle, DRAIN_SECS):
            # Their tuples fail now (they replay); a write finishing later is not acked twice.
            for item in writer.pop_done() + writer.items():
                key, tups, batch_id = item.payload
                if batch_id not in self._abandoned:
                    self._abandoned.add(batch_id)
                    self._fail_batch(tups)

    # ------------------------------------------------------------ raw messages (executor thread)
    def make_driver(self, task: Any) -> Any:
        """Raw batches of messages, kept as they arrive (no Tuple per row), unless a subclass
        overrides ``process``, ``group_key`` or ``process_batch`` (then one Tuple per row)."""
        cls = type(self)
        self._raw = (cls.process is SparkSinkBolt.process and cls.group_key is SparkSinkBolt.group_key
                     and cls.process_batch is SparkSinkBolt.process_batch)
        if not self._raw:
            return super().make_driver(task)
        from stormpy.task.drivers import RawBatchDriver

        self._routes: dict[tuple[str, int], Hashable | None] = {}
        self._dropped_routes: set[tuple[str, int]] = set()
        return RawBatchDriver(self._take_messages, self.pending_tuples, self.flush_batches)

    def _take_messages(self, messages: list[Any]) -> None:
        """A received batch of ``(stream, src_task, values, anchors)`` into the batches: one
        ``extend`` per run of one source task and stream, no Python work per row."""
        if not messages:
            return
        first = messages[0]
        route = (first[0], first[1])
        # One route (the usual: a batch from one source task): two C-speed counts, a third of
        # the cost of a set of (stream, task) pairs, which builds a tuple per message.
        n = len(messages)
        if list(map(_SOURCE, messages)).count(first[1]) == n and list(map(_STREAM, messages)).count(first[0]) == n:
            self._take_run(route, messages)
            return
        start = 0
        for index, message in enumerate(messages):
            if (message[0], message[1]) != route:
                self._take_run(route, messages[start:index])
                route, start = (message[0], message[1]), index
        self._take_run(route, messages[start:])

    def _open_batch(self, key: Any, rows: list[Any] | None = None) -> list[Any]:
        """A new batch for ``key`` (empty, or ``rows``); its age (``spark.sink.batch.secs``)
        counts from now."""
        batch: list[Any] = [] if rows is None else rows
        self._batches[key] = batch
        self._opened[key] = time.monotonic()
        return batch

    def _take_run(self, route: tuple[str, int], run: list[Any]) -> None:
        key = self._routes.get(route, _UNKNOWN)
        if key is _UNKNOWN:
            key = self._routes[route] = self._route_key(route)
        if key is None:
            self._system_messages(route, run)
            return
        self.count_executed(key, len(run))  # type: ignore[arg-type]
        batch = self._batches.get(key)
        if batch is None:
            batch = self._open_batch(key)
        batch.extend(run)
        if len(batch) >= self.batch_size:  # type: ignore[operator]
            self._hand_over_full(key)

    def _write_cap(self, key: Hashable) -> int:
        """How many rows one write of ``key``'s batch may take: ``spark.sink.batch.size``, or up to
        ``spark.state.max.batches.per.write`` times that for batches that take the Parquet
        hand-over (the built-in writer through Spark Connect or a cluster master).

        Why: each such write is a Spark job with a fixed cost (~0.15-0.3 s through Spark Connect
        on a small machine) that does not depend on its rows; while the writer is busy with one,
        the batch being filled keeps growing, and the next job writes all of it.
        """
        size = int(self.batch_size)  # type: ignore[arg-type]
        return size * self._per_write if self._writer is not None and self._parquet_targets.get(key) else size

    def _hand_over_full(self, key: Hashable) -> None:
        """Hand over ``key``'s batch while it holds ``spark.sink.batch.size`` rows or more: whole
        batches (a multiple of ``spark.sink.batch.size`` rows, at most ``_write_cap``), the rest
        starting the next batch; a batch that may grow waits while the writer is busy (it is
        handed over when the write in front of it is settled, ``_settle_finished``)."""
        size = int(self.batch_size)  # type: ignore[arg-type]
        cap = self._write_cap(key)
        batch = self._batches.get(key)
        while batch is not None and len(batch) >= size:
            if cap > len(batch) and self._writer is not None and self._writer.full:
                return
            take = min(cap, len(batch) // size * size)   # whole batches: the rest starts the next one
            rest = batch[take:]
            del batch[take:]
            self._run_batch(key)
            if not rest:
                return
            batch = self._open_batch(key, rest)

    def _route_key(self, route: tuple[str, int]) -> Hashable | None:
        """(component, stream) of an input stream's messages, None for messages on no input (ticks)."""
        stream, src = route
        component = getattr(self._context, "task_to_component", {}).get(src)
        key = (component, stream)
        if component is None or stream == TICK or (self._stream_fields and key not in self._stream_fields):
            return None
        return key

    def _system_messages(self, route: tuple[str, int], run: list[Any]) -> None:
        stream, src = route
        if stream == TICK:
            for message in run:
                tick = Tuple(None, SYSTEM_COMPONENT, TICK, src, list(message[2]))
                tick._done = True
                self.process_tick(tick)
            return
        if route not in self._dropped_routes:   # once per (stream, task): a wrong wiring, not a rate
            self._dropped_routes.add(route)
            self.logger.warning("messages on stream %r from task %r, not an input of this sink, are dropped",
                                stream, src)

    def group_key(self, tup: Tuple) -> Hashable:
        """One batch per input stream: each stream has its own fields, so its own columns."""
        return (tup.component, tup.stream)

    def process(self, tup: Tuple) -> None:
        """BatchingBolt.process for the per-tuple hot path: the stream key the executor already
        built (``tup._skey``) instead of a ``group_key`` call and a new key tuple per tuple."""
        if type(self).group_key is not SparkSinkBolt.group_key:
            super().process(tup)
            return
        key = tup._skey or (tup.component, tup.stream)
        batch = self._batches.get(key)
        if batch is None:
            batch = self._open_batch(key)
        batch.append(tup)
        if len(batch) >= self.batch_size:  # type: ignore[operator]
            self._run_batch(key)

    def _run_batch_here(self, key: Hashable) -> None:
        """``spark.sink.max.inflight.batches`` 0 with raw messages: write on this thread, then
        ack the batch, or fail it and report the error (the task lives on)."""
        tups = self._batches.pop(key, None)
        if not tups:
            return
        try:
            self.process_batch(key, tups)
        except Exception as exc:  # noqa: BLE001 - the batch fails and replays; the sink lives on
            self.logger.error("batch %d failed for %s (%d tuples): %s", self.last_batch_id, _stream_name(key),
                              len(tups), exc)
            self._fail_batch(tups)
            self.report_error("".join(traceback.format_exception(exc)))
            return
        self._ack_batch(tups)

    def process_batch(self, key: Hashable, tups: list[Tuple]) -> None:
        """Convert the batch and write it (``_hand_over``); raising fails every tuple of it."""
        self._opened.pop(key, None)
        self.last_batch_id += 1
        batch_id = self.last_batch_id
        started = time.monotonic()
        try:
            self._hand_over(key, tups, batch_id)
        except Exception:
            self._count_failure(len(tups))
            raise
        secs = time.monotonic() - started
        self._count_success(len(tups), secs, batch_id)
        self.logger.debug("batch %d: %d rows written in %.3f s", batch_id, len(tups), secs)

    def _count_success(self, rows: int, secs: float, batch_id: int) -> None:
        self.metrics.incr("batches")
        self.metrics.incr("rows", rows)
        self.metrics.incr("spark_secs_total", secs)
        self.metrics.set("spark_secs_last", round(secs, 4))
        self.metrics.set("spark_secs_per_batch", round(self.metrics["spark_secs_total"] / self.metrics["batches"], 4))
        self.metrics.set("last_batch_id", batch_id)

    def _count_failure(self, rows: int) -> None:
        self.metrics.incr("failed_batches")
        self.metrics.incr("failed_rows", rows)

    def handle_batch(self, spark: Any, df: Any, batch_id: int) -> None:
        """Do something with one batch; by default write it with the built-in writer.

        Override for aggregations, joins or other systems; return only when the work is done
        (the tuples are acked then), raise to fail the whole batch.
        """
        self.write(spark, df, batch_id)

    def write(self, spark: Any, df: Any, batch_id: int) -> None:
        """Write ``df`` with the built-in writer (``spark.sink.path``/``format``/``table``...).

        For ``handle_batch`` overrides that transform the batch and then store the result.
        """
        if not self.sink.has_writer:
            raise ConfigError(f"{type(self).__name__}.write needs spark.sink.path or spark.sink.table")
        write_batch(spark, df, self.sink, f"task{self._task_id}-batch{batch_id}")

    # ------------------------------------------------------------ Spark
    def spark(self) -> Any:
        """This process's SparkSession, started on first use (5-6 s cold) and then shared."""
        if self._spark is None:
            started = time.monotonic()
            self._spark = acquire_session(self._stormconf)
            self._handover = ArrowHandover(self._spark)
            self.metrics.set("spark_session_start_secs", round(time.monotonic() - started, 3))
        return self._spark

    def _converter(self, key: Hashable, first: Sequence[Any]) -> RowConverter:
        converter = self._converters.get(key)
        if converter is None:
            if self.sink.schema is not None and self._schema is None:
                self._schema = parse_schema(self._spark, self.sink.schema)
            converter = RowConverter(self._field_names(key, first), self._schema)
            self._converters[key] = converter
        return converter

    def _field_names(self, key: Hashable, first: Sequence[Any]) -> tuple[str, ...]:
        """The declared fields of the batch's stream, else the first row's names or ``_1, _2, ...``."""
        declared = self._stream_fields.get(key)  # type: ignore[arg-type]
        if declared:
            return declared
        named = getattr(first, "_fields", None)
        if named:
            return tuple(named)
        return tuple(f"_{i + 1}" for i in range(len(first)))


def _stream_name(key: Hashable) -> str:
    if isinstance(key, tuple) and len(key) == 2:
        return f"{key[0]}:{key[1]}"
    return repr(key)
