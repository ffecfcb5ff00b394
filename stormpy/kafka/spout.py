"""KafkaSpout: a core spout reading Kafka topics with a consumer group (storm-kafka-client's KafkaSpout).

Every task of the spout is one member of the group ``group_id``: Kafka spreads the partitions
over the tasks and moves them when a task comes or goes (a rebalance, a worker killed). With
``AT_LEAST_ONCE`` each record is emitted with a tuple id; the offset a partition commits is
the lowest offset of that partition that is not done yet (polled and not emitted, in flight, or
waiting for a retry), so a committed offset never passes an un-acked record and whoever owns
the partition next re-reads everything not acked. A failed tuple is emitted again after the
:class:`~stormpy.kafka.config.RetryPolicy`'s backoff.

A rebalance first commits what is done for the partitions leaving this task and forgets them:
acks arriving later for their records are ignored (the tuple id carries the assignment's
generation), and their records are re-read by their new owner from the committed offset.

Everything runs on the spout's executor thread: librdkafka's rebalance callbacks are served
inside ``poll``, which ``next_tuple`` calls, and inside ``close``. They never raise into
librdkafka: confluent-kafka on Python < 3.12 hands an exception raised in a callback by a C
call (``committed()`` timing out) back out of ``consume``/``close`` as a bare ``KafkaError``,
which is no exception class, so neither ``except Exception`` nor ``except BaseException``
catches it. A callback's error is kept instead and raised by ``next_tuple`` (or logged by
``close``) once librdkafka returned. When the group's committed offsets cannot be read in
time, the partitions are assigned without an offset: librdkafka then fetches the committed
offsets itself (or applies ``auto.offset.reset``), so the task goes on instead of stalling.
"""
from __future__ import annotations

import functools
import heapq
import json
import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from stormpy.api.component import Spout
from stormpy.config import TOPOLOGY_NAME
from stormpy.kafka.config import (FirstPollOffsetStrategy, KafkaSpoutConfig, ProcessingGuarantee, is_plain_default,
                                  new_client)
from stormpy.streams import DEFAULT_STREAM

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]
#: librdkafka's "no offset": on assign it resumes at the group's committed offset (or auto.offset.reset)
OFFSET_INVALID = -1001
#: (topic, partition, offset, generation of the assignment that emitted it)
MessageId = tuple[str, int, int, int]
#: A buffered record whose values its translator's ``apply`` makes when it is emitted
LATER = object()


class PartitionProgress:
    """One assigned partition: which polled offsets are not done, and what was committed.

    ``commit_point()`` is the offset the group may resume at: the lowest offset not done, or
    one past the highest polled when everything is done (gaps, such as transaction markers or
    compacted records, are skipped because only polled offsets are ever waited for).
    """

    def __init__(self, generation: int, committed: int | None) -> None:
        self.generation = generation
        self.committed = committed      # what this task committed or found committed (None: nothing)
        self.high: int | None = None    # one past the highest offset polled
        self.not_done: set[int] = set()

    def commit_point(self) -> int | None:
        if self.not_done:
            return min(self.not_done)
        return self.high

    def uncommitted(self) -> int:
        if self.high is None:
            return 0
        base = self.committed if self.committed is not None and self.committed >= 0 else self.high - len(self.not_done)
        return max(0, self.high - base)


class KafkaSpout(Spout):
    """``KafkaSpout(KafkaSpoutConfig(bootstrap_servers=..., topics=[...], group_id=...)).spec(par=n)``."""

    def __init__(self, config: KafkaSpoutConfig) -> None:
        if not isinstance(config, KafkaSpoutConfig):
            raise TypeError(f"KafkaSpout takes a KafkaSpoutConfig, given {config!r}")
        self.spout_config = config
        self.outputs = list(config.record_translator.fields)
        if config.record_translator.stream != "default":
            from stormpy.api.dsl import Stream
            self.outputs = [Stream(fields=list(config.record_translator.fields),
                                   name=config.record_translator.stream)]

    # spec() of an instance carries its outputs (the translator's fields)
    @property
    def spec(self) -> Any:  # type: ignore[override]
        """Declare this spout (with its KafkaSpoutConfig) in a Topology class."""
        from stormpy.api.dsl import instance_spec

        return instance_spec(self)

    # ------------------------------------------------------------ lifecycle
    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        from confluent_kafka import Consumer

        cfg = self.spout_config
        self.guarantee = cfg.processing_guarantee
        # read once a record: an enum member's lookup costs about 0.1 us
        self.tracked = self.guarantee is ProcessingGuarantee.AT_LEAST_ONCE
        self.at_most_once = self.guarantee is ProcessingGuarantee.AT_MOST_ONCE
        self.translator = cfg.record_translator
        # the default translator as written: _poll makes its values inline, where it reads the
        # record's topic, partition and offset anyway
        self.translate_inline = is_plain_default(self.translator)
        # The default stream is emitted unnamed: an emit naming any stream takes the engine's
        # general path (about 1 us more a tuple than the spout's fast emit, benchmarks.md "Kafka:
        # what the read costs").
        stream = self.translator.stream
        self.emit_stream = None if stream == DEFAULT_STREAM else stream
        self.topology_id = getattr(context, "topology_id", "") or stormconf.get(TOPOLOGY_NAME.name, "")
        self.commit_metadata = json.dumps({"topologyId": self.topology_id,
                                           "taskId": getattr(context, "task_id", 0)})
        self.parts: dict[TopicPart, PartitionProgress] = {}
        self.generation = 0
        # (record, its partition, its offset, generation, its values or LATER or its decoding
        # error) polled, not emitted yet
        self.buffer: deque[tuple[Any, TopicPart, int, int, Any]] = deque()
        self.in_flight: dict[MessageId, tuple[list[Any], int]] = {}   # id -> (values, failures)
        self.retries: list[tuple[float, MessageId]] = []   # heap of (due, id)
        self.paused = False
        self.last_commit = time.monotonic()
        self.commit_period = cfg.offset_commit_period_ms / 1000.0
        self.poll_timeout = cfg.poll_timeout_ms / 1000.0
        self.closing = False
        self.callback_error: Exception | None = None   # raised by next_tuple after librdkafka returned
        self.cooperative = "cooperative" in str(cfg.kafka_conf.get("partition.assignment.strategy", ""))
        self.consumer = new_client(Consumer, cfg.consumer_conf())
        self.consumer.subscribe(cfg.subscription(), on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        log.info("KafkaSpout task %s joined group %s for %s (%s, %s)", getattr(context, "task_id", "?"),
                 cfg.group_id, cfg.subscription(), self.guarantee.value, cfg.first_poll_offset_strategy.value)

    def close(self) -> None:
        consumer = getattr(self, "consumer", None)
        if consumer is None:
            return
        self.closing = True   # a rebalance served inside close() does not wait for committed offsets
        try:
            self.commit()
            consumer.close()   # leaves the group now: its partitions move without a session timeout
        except Exception as exc:   # closing must not hide the reason the task stops
            log.warning("KafkaSpout: closing the consumer failed: %s", exc)
        self.consumer = None
        error, self.callback_error = getattr(self, "callback_error", None), None
        if error is not None:
            log.warning("KafkaSpout: a rebalance callback failed while closing: %s", error)

    def deactivate(self) -> None:
        self.commit()

    # ------------------------------------------------------------ rebalance (inside poll and close)
    #: How long an assignment waits for the group's committed offsets (a rebalance blocks the
    #: spout's next_tuple meanwhile); past it librdkafka fetches them itself.
    committed_timeout_secs = 5.0

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self._callback("assign", self._assign, consumer, partitions)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self._callback("revoke", self._revoke, consumer, partitions)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._callback("lost", self._lost, consumer, partitions)

    def _callback(self, what: str, handler: Any, consumer: Any, partitions: list[Any]) -> None:
        """Run a rebalance handler without raising into librdkafka (see the module's doc): the
        ``except`` here turns even a C call's half-made exception into a real one, kept for
        ``next_tuple`` to raise (the task restarts, as after any error of its own)."""
        try:
            handler(consumer, partitions)
        except Exception as exc:
            log.error("KafkaSpout: the %s rebalance callback failed (raised by next_tuple): %s: %s",
                      what, type(exc).__name__, exc)
            if self.callback_error is None:
                self.callback_error = exc

    def _committed(self, consumer: Any, partitions: list[Any]) -> dict[TopicPart, Any] | None:
        """The group's committed offsets of ``partitions``; None when they could not be read in time."""
        from confluent_kafka import KafkaException

        if not partitions:
            return {}
        if self.closing:
            return None
        try:
            found = consumer.committed(partitions, timeout=self.committed_timeout_secs)
        except KafkaException as exc:
            log.warning("KafkaSpout: reading the committed offsets of %s failed (%s): librdkafka resumes "
                        "them at the group's committed offsets itself (or auto.offset.reset)",
                        sorted((tp.topic, tp.partition) for tp in partitions), exc.args[0] if exc.args else exc)
            return None
        return {(tp.topic, tp.partition): tp for tp in found}

    def _assign(self, consumer: Any, partitions: list[Any]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

        self.generation += 1
        strategy = self.spout_config.first_poll_offset_strategy
        committed = self._committed(consumer, partitions)
        for tp in partitions:
            if committed is None:   # unknown: resume what the group committed, whoever did
                tp.offset = OFFSET_INVALID
                self.parts[(tp.topic, tp.partition)] = PartitionProgress(self.generation, None)
                continue
            found = committed.get((tp.topic, tp.partition))
            offset = found.offset if found is not None else OFFSET_INVALID
            ours = found is not None and self.topology_id and self.topology_id in (found.metadata or "")
            if strategy is FirstPollOffsetStrategy.EARLIEST and not ours:
                tp.offset = OFFSET_BEGINNING
            elif strategy is FirstPollOffsetStrategy.LATEST and not ours:
                tp.offset = OFFSET_END
            elif offset >= 0:
                tp.offset = offset
            self.parts[(tp.topic, tp.partition)] = PartitionProgress(self.generation, offset if offset >= 0 else None)
        if self.cooperative:
            consumer.incremental_assign(partitions)   # the other partitions stay where they are
        else:
            consumer.assign(partitions)
        log.info("KafkaSpout assigned %s", [(tp.topic, tp.partition, tp.offset) for tp in partitions])

    def _revoke(self, consumer: Any, partitions: list[Any]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.commit(only=gone)
        self._forget(gone)
        log.info("KafkaSpout revoked %s", sorted(gone))

    def _lost(self, consumer: Any, partitions: list[Any]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._forget(gone)   # someone else owns them already: committing would be wrong
        log.warning("KafkaSpout lost %s", sorted(gone))

    def _forget(self, gone: set[TopicPart]) -> None:
        for key in gone:
            self.parts.pop(key, None)
        self.buffer = deque(item for item in self.buffer if item[1] not in gone)
        for msg_id in [m for m in self.in_flight if (m[0], m[1]) in gone]:
            del self.in_flight[msg_id]
        self.retries = [r for r in self.retries if (r[1][0], r[1][1]) not in gone]
        heapq.heapify(self.retries)

    # ------------------------------------------------------------ commits
    def commit(self, only: set[TopicPart] | None = None) -> None:
        """Commit each partition's commit point (synchronously) where it moved."""
        from confluent_kafka import KafkaException, TopicPartition

        if getattr(self, "consumer", None) is None:
            return
        offsets = []
        for key, progress in self.parts.items():
            if only is not None and key not in only:
                continue
            point = progress.commit_point()
            if point is not None and (progress.committed is None or point > progress.committed):
                offsets.append((key, point))
        self.last_commit = time.monotonic()
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, off, metadata=self.commit_metadata)
                                          for (t, p), off in offsets], asynchronous=False)
        except KafkaException as exc:
            log.warning("KafkaSpout: commit of %s failed (retried at the next commit): %s", offsets, exc)
            return
        for key, point in offsets:
            if key in self.parts:
                self.parts[key].committed = point
        log.debug("KafkaSpout committed %s", offsets)

    def uncommitted(self) -> int:
        return sum(p.uncommitted() for p in self.parts.values())

    # ------------------------------------------------------------ emitting
    def next_tuple(self) -> None:
        now = time.monotonic()
        if now - self.last_commit >= self.commit_period and not self.at_most_once:
            self.commit()
        if self.retries and self.retries[0][0] <= now:
            _, msg_id = heapq.heappop(self.retries)
            entry = self.in_flight.get(msg_id)
            if entry is not None:
                self.emit(entry[0], tup_id=msg_id, stream=self.emit_stream)
            return
        if not self.buffer:
            self._poll()
            if not self.buffer:
                return
        record, key, offset, generation, values = self.buffer.popleft()
        progress = self.parts.get(key)
        if progress is None or progress.generation != generation:
            return   # revoked since the poll: its new owner reads it
        if type(values) is not list:
            values = self._translate(record, key, offset, generation, values)
            if values is None:
                return
        if self.tracked:
            msg_id = (key[0], key[1], offset, generation)
            self.in_flight[msg_id] = (values, 0)
            self.emit(values, tup_id=msg_id, stream=self.emit_stream)
        else:
            progress.not_done.discard(offset)
            self.emit(values, stream=self.emit_stream)

    def _poll(self) -> None:
        from confluent_kafka import KafkaError

        limit = self.spout_config.max_uncommitted_offsets
        over = self.tracked and self.uncommitted() >= limit
        if over != self.paused:
            assignment = self.consumer.assignment()
            if assignment:
                (self.consumer.pause if over else self.consumer.resume)(assignment)
            self.paused = over
        # in flight, the acks and the loop's other executors wait on this thread: no waiting then
        # (KafkaSpoutConfig.poll_timeout_ms). Waiting up to 20 ms here (200 when idle) moved the
        # spout off the loop and cost the Kafka word count 15-30% (benchmarks/kafka_wordcount.py).
        busy = bool(self.in_flight) or self.paused
        records = self.consumer.consume(self.spout_config.max_poll_records, timeout=0 if busy else self.poll_timeout)
        if self.callback_error is not None:
            error, self.callback_error = self.callback_error, None
            raise error
        if not records:
            return
        # The default translator's values are made here, a record at a time, where its topic,
        # partition and offset are read anyway; another translator's apply runs at emit (LATER).
        encoding = self.translator.encoding if self.translate_inline else LATER
        last: dict[TopicPart, int] = {}
        append, parts = self.buffer.append, self.parts
        for record in records:
            err = record.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("KafkaSpout: consumer error: %s", err)
                continue
            topic, number = record.topic(), record.partition()
            key = (topic, number)
            progress = parts.get(key)
            if progress is None:
                continue   # revoked while the poll ran
            offset = record.offset()
            progress.not_done.add(offset)
            last[key] = offset
            values: Any = LATER
            if encoding is not LATER:
                raw_key, raw_value = record.key(), record.value()
                try:
                    if encoding is not None:
                        raw_key = raw_key if raw_key is None else raw_key.decode(encoding)
                        raw_value = raw_value if raw_value is None else raw_value.decode(encoding)
                    values = [topic, number, offset, raw_key, raw_value]
                except Exception as exc:   # reported and skipped at its turn, by _translate
                    values = exc.with_traceback(None)   # not this frame, which holds the whole poll
            append((record, key, offset, progress.generation, values))
        for key, offset in last.items():   # a poll gives a partition's records in offset order
            progress = parts[key]
            if progress.high is None or offset + 1 > progress.high:
                progress.high = offset + 1
        if self.at_most_once and last:
            # committed before anything is emitted: a crash loses these records, never repeats them
            for key in last:
                parts[key].not_done.clear()
            self.commit()

    def _translate(self, record: Any, key: TopicPart, offset: int, generation: int, values: Any) -> Any:
        """A record's values from a translator other than the default (``LATER``), or the
        default's decoding error (``values``); None when the record is not emitted."""
        if values is not LATER:
            return self._skip(values, key, offset, generation)
        try:
            values = self.translator.apply(record)
        except Exception as exc:
            return self._skip(exc, key, offset, generation)
        if values is None:
            self.parts[key].not_done.discard(offset)   # the translator filtered it out
        return values

    def _skip(self, error: Exception, key: TopicPart, offset: int, generation: int) -> None:
        text = (f"KafkaSpout: record {key[0]}/{key[1]}@{offset} could not be "
                f"translated ({type(error).__name__}: {error}); skipped")
        log.warning("%s", text)
        self.metrics.incr("kafka-records-skipped")
        # done (committable) only once the error is kept: a crash before that re-reads the record
        self._stormpy_collector.report_error(text, then=functools.partial(self._skipped, key, offset, generation))

    # ------------------------------------------------------------ acker answers
    def ack(self, tup_id: Any) -> None:
        if self.in_flight.pop(tup_id, None) is None:
            return   # its partition was revoked: the new owner re-reads it
        progress = self.parts.get((tup_id[0], tup_id[1]))
        if progress is not None and progress.generation == tup_id[3]:
            progress.not_done.discard(tup_id[2])

    def fail(self, tup_id: Any) -> None:
        entry = self.in_flight.get(tup_id)
        if entry is None:
            return
        values, failures = entry
        failures += 1
        retry = self.spout_config.retry
        if retry.retry_allowed(failures):
            self.in_flight[tup_id] = (values, failures)
            heapq.heappush(self.retries, (time.monotonic() + retry.delay_secs(failures), tup_id))
            self.metrics.incr("kafka-retries")
            return
        text = (f"KafkaSpout: record {tup_id[0]}/{tup_id[1]}@{tup_id[2]} failed {failures} times "
                f"(max_retries {retry.max_retries}); given up")
        log.warning("%s", text)
        self._stormpy_collector.report_error(text, then=functools.partial(self.ack, tup_id))

    def _skipped(self, key: TopicPart, offset: int, generation: int) -> None:
        progress = self.parts.get(key)
        if progress is not None and progress.generation == generation:
            progress.not_done.discard(offset)
