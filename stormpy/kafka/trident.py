"""Trident Kafka spouts: one Trident partition per Kafka partition (Storm's KafkaTridentSpoutOpaque
and KafkaTridentSpoutTransactional).

A batch of one partition is the records ``[offset, next_offset)``; its meta
``{"topic", "partition", "offset", "next_offset"}`` is kept by Trident's spout coordinator in
the transactional state (ZooKeeper on a cluster), never committed to Kafka:

- :class:`OpaqueKafkaSpout`: a txid's batch starts where the previous txid's batch ended
  (``next_offset``), so a replayed txid re-reads what it can from there (more records may have
  arrived), and with an opaque state every record lands in exactly one committed batch;
- :class:`TransactionalKafkaSpout`: the meta of a txid is stored before its batch leaves, and
  a replay re-reads exactly that offset range (records deleted by retention meanwhile are
  gone: that replay is smaller, the one case where a transactional state cannot be exact).

The partition list is read from the brokers when the spout's tasks start (a topic that does
not exist yet is created with the broker's defaults when auto-creation is on); partitions
added later are picked up by a rebalance or a restart. Each task reads its partitions with one
librdkafka consumer per partition, assigned (no group membership, nothing committed): the
consumer group only names the reader in the broker's logs.

A new batch waits at most ``poll_timeout_ms`` (1 ms) per partition for its first record, and
takes what librdkafka fetched by then (its own threads fetch ahead): the emitter runs on the
executor loop, where a wait holds up the process's other executors. Waiting 50 ms moved the
spout to a thread of its own, and the Kafka Trident word count went from 63,000-85,000 to
322,000-328,000 records/s at 1 ms (``benchmarks/kafka_wordcount.py``, mock cluster). A replay
waits (up to 30 s) for exactly the records of its batch.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from stormpy.kafka.config import (FirstPollOffsetStrategy, RecordTranslator, _enum, is_plain_default, make_translator,
                                  new_client)
from stormpy.trident.runtime.spouts import OpaquePartitionedSpout, PartitionedSpout

log = logging.getLogger(__name__)


class _KafkaTridentSpout:
    """What both Trident Kafka spouts share: partitions, per-partition readers, translation."""

    def __init__(self, bootstrap_servers: str, topics: Sequence[str] | str | re.Pattern[str],
                 group_id: str = "stormpy-trident", max_batch_size: int = 1000,
                 first_poll_offset_strategy: FirstPollOffsetStrategy | str = FirstPollOffsetStrategy.EARLIEST,
                 record_translator: Any = None, poll_timeout_ms: int = 1,
                 kafka_conf: Mapping[str, Any] | None = None) -> None:
        if not bootstrap_servers or not isinstance(bootstrap_servers, str):
            raise ValueError(f"{type(self).__name__}: bootstrap_servers must be 'host:port[,host:port...]'")
        if max_batch_size <= 0:
            raise ValueError(f"{type(self).__name__}: max_batch_size must be positive, given {max_batch_size!r}")
        self.bootstrap_servers = bootstrap_servers
        if isinstance(topics, str):
            topics = [topics]
        if not isinstance(topics, re.Pattern) and (not topics or not all(isinstance(t, str) and t for t in topics)):
            raise ValueError(f"{type(self).__name__}: topics must be topic names or a pattern, given {topics!r}")
        self.topics = topics if isinstance(topics, re.Pattern) else list(topics)
        self.group_id = group_id
        self.max_batch_size = int(max_batch_size)
        self.first_poll_offset_strategy = _enum(FirstPollOffsetStrategy, first_poll_offset_strategy,
                                                "first_poll_offset_strategy")
        self.translator: RecordTranslator = make_translator(record_translator)
        self.poll_timeout = poll_timeout_ms / 1000.0
        self.kafka_conf = dict(kafka_conf or {})
        self.outputs = list(self.translator.fields)
        self.readers: dict[str, Any] = {}
        self.positions: dict[str, int] = {}

    # ------------------------------------------------------------ lifecycle
    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        self.readers = {}
        self.positions = {}
        self.task_id = getattr(context, "task_id", 0)

    def close(self) -> None:
        for reader in self.readers.values():
            try:
                reader.close()
            except Exception as exc:   # noqa: BLE001 - closing must not hide why the task stops
                log.warning("%s: closing a consumer failed: %s", type(self).__name__, exc)
        self.readers = {}

    def _conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "group.id": self.group_id,
                                "log_level": 4}
        conf.update(self.kafka_conf)
        conf["enable.auto.commit"] = False
        conf["enable.auto.offset.store"] = False
        return conf

    def partitions(self) -> list[str]:
        """Every partition of the topics, as ``"topic:partition"`` (':' never occurs in a topic name)."""
        from confluent_kafka import Consumer

        probe = new_client(Consumer, self._conf())
        try:
            if isinstance(self.topics, re.Pattern):
                metadata = probe.list_topics(timeout=30)
                names = sorted(t for t in metadata.topics if self.topics.fullmatch(t))
            else:
                names = list(self.topics)
            found: list[str] = []
            for name in names:
                deadline = time.monotonic() + 30
                while True:
                    topic = probe.list_topics(name, timeout=30).topics.get(name)
                    if topic is not None and topic.error is None and topic.partitions:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{type(self).__name__}: topic {name!r} has no partitions "
                                           f"at {self.bootstrap_servers} ({topic.error if topic else 'missing'})")
                    time.sleep(0.5)
                found += [f"{name}:{p}" for p in sorted(topic.partitions)]
            return found
        finally:
            probe.close()

    # ------------------------------------------------------------ reading
    def _reader(self, partition: str, start: int) -> Any:
        """The consumer of ``partition``, positioned at ``start`` (re-assigned when it is elsewhere)."""
        from confluent_kafka import Consumer, TopicPartition

        topic, number = partition.rsplit(":", 1)
        reader = self.readers.get(partition)
        if reader is None:
            reader = new_client(Consumer, self._conf())
            self.readers[partition] = reader
            self.positions[partition] = -1
        if self.positions[partition] != start:
            reader.assign([TopicPartition(topic, int(number), start)])
            self.positions[partition] = start
        return reader

    def _first_offset(self, partition: str) -> int:
        from confluent_kafka import Consumer, TopicPartition

        topic, number = partition.rsplit(":", 1)
        reader = self.readers.get(partition)
        if reader is None:
            reader = new_client(Consumer, self._conf())
            self.readers[partition] = reader
            self.positions[partition] = -1
        low, high = reader.get_watermark_offsets(TopicPartition(topic, int(number)), timeout=30)
        if self.first_poll_offset_strategy in (FirstPollOffsetStrategy.LATEST, FirstPollOffsetStrategy.UNCOMMITTED_LATEST):
            return high
        return low

    def _read(self, partition: str, start: int, end: int | None) -> list[Any]:
        """Records of ``partition`` from ``start``: up to ``max_batch_size``, or exactly up to ``end``."""
        reader = self._reader(partition, start)
        want = self.max_batch_size if end is None else end - start
        got: list[Any] = []
        expected = start
        deadline = time.monotonic() + (30.0 if end is not None else self.poll_timeout)
        while len(got) < want:
            timeout = 0 if (end is None and got) else max(0.0, deadline - time.monotonic())
            records = reader.consume(want - len(got), timeout=timeout)
            fresh = 0
            for record in records:
                if record.error() is not None:
                    log.warning("%s: reading %s: %s", type(self).__name__, partition, record.error())
                    continue
                offset = record.offset()   # a C call each: once per record
                if offset < expected:
                    continue   # fetched for an earlier position: never read a record twice in a batch
                if end is None or offset < end:
                    got.append(record)
                    expected = offset + 1
                    fresh += 1
            if not fresh and (end is None or time.monotonic() > deadline):
                break
            if end is not None and got and got[-1].offset() >= end - 1:
                break
            if time.monotonic() > deadline + (0 if end is not None else 1.0):
                break
        if got:
            self.positions[partition] = got[-1].offset() + 1
        elif end is not None:
            self.positions[partition] = -1   # unknown: re-assign next time
        return got

    def _emit(self, collector: Any, records: list[Any]) -> None:
        translator = self.translator
        if records and is_plain_default(translator):
            self._emit_default(collector, records)
            return
        for record in records:
            try:
                values = self.translator.apply(record)
            except Exception as exc:
                # the batch goes on without it: a record that cannot be decoded never stalls the partition
                log.warning("%s: record %s/%d@%d could not be translated (%s: %s); skipped", type(self).__name__,
                            record.topic(), record.partition(), record.offset(), type(exc).__name__, exc)
                continue
            if values is not None:
                collector.emit(values)

    def _emit_default(self, collector: Any, records: list[Any]) -> None:
        """``RecordTranslator.apply`` inlined for a batch (the records of one partition): the
        topic and partition once, the key and value decoded here (a subclass, or an instance whose
        ``apply`` was replaced, goes record by record). Reading a record costs this
        thread most of what a Trident word count spends on it (benchmarks.md, "Kafka: what the
        read costs"); the translator's method and its two decode calls were a fifth of that."""
        encoding, emit = self.translator.encoding, collector.emit
        topic, number = records[0].topic(), records[0].partition()
        for record in records:
            key, value = record.key(), record.value()
            if encoding is not None:
                try:
                    key = key if key is None else key.decode(encoding)
                    value = value if value is None else value.decode(encoding)
                except Exception as exc:
                    # the batch goes on without it: a record that cannot be decoded never stalls the partition
                    log.warning("%s: record %s/%d@%d could not be translated (%s: %s); skipped", type(self).__name__,
                                topic, number, record.offset(), type(exc).__name__, exc)
                    continue
            emit([topic, number, record.offset(), key, value])

    def _meta(self, partition: str, start: int, records: list[Any]) -> dict[str, Any]:
        topic, number = partition.rsplit(":", 1)
        return {"topic": topic, "partition": int(number), "offset": start,
                "next_offset": records[-1].offset() + 1 if records else start}


class OpaqueKafkaSpout(_KafkaTridentSpout, OpaquePartitionedSpout):
    """Opaque Trident spout over Kafka (Storm's KafkaTridentSpoutOpaque); see the module doc."""

    def emit_batch(self, txid: int, collector: Any, partition: Any, last_meta: Any) -> Any:
        start = last_meta["next_offset"] if last_meta else self._first_offset(partition)
        records = self._read(partition, start, None)
        self._emit(collector, records)
        return self._meta(partition, start, records)


class TransactionalKafkaSpout(_KafkaTridentSpout, PartitionedSpout):
    """Transactional Trident spout over Kafka: a replayed txid re-reads exactly its stored offset range."""

    def emit_new_batch(self, txid: int, collector: Any, partition: Any, last_meta: Any) -> Any:
        start = last_meta["next_offset"] if last_meta else self._first_offset(partition)
        records = self._read(partition, start, None)
        self._emit(collector, records)
        return self._meta(partition, start, records)

    def emit_batch(self, txid: int, collector: Any, partition: Any, meta: Any) -> None:
        if meta["next_offset"] > meta["offset"]:
            self._emit(collector, self._read(partition, meta["offset"], meta["next_offset"]))
