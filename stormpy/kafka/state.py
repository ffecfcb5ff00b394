"""KafkaState: Trident ``partition_persist`` into a Kafka topic (Storm's TridentKafkaState).

``stream.partition_persist(KafkaState.factory(bootstrap, topic), ["key", "message"], KafkaStateUpdater())``

Each state partition has its own idempotent producer. With ``transactional=True`` (the default)
its ``transactional.id`` is ``<prefix>-<topology name>-<partition>``: a restarted worker's
producer fences the dead one's, and each Trident batch is written inside one Kafka transaction,
begun at ``begin_commit(txid)`` and committed at ``commit(txid)``. So a consumer with
``isolation.level=read_committed`` sees a batch's records all at once, and never the records of
an attempt that failed (aborted, or left open by a killed worker and aborted by the fencing).

A txid this state already committed is not written again (a replayed commit, e.g. its ack was
lost): the last committed txid of each partition is kept in the topology's transactional
state (ZooKeeper on a cluster). The one gap: a worker killed after the broker committed the
transaction and before that txid was recorded writes the batch again when it is replayed;
every record carries the header ``stormpy.txid`` so a consumer can drop such a repeat.
Without transactions (``transactional=False``, or a broker that has none) the records of a
batch are flushed at ``commit`` and a delivery failure fails the batch: at least once.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.kafka.bolt import FieldNameMapper, _to_bytes
from stormpy.kafka.config import new_client
from stormpy.trident.state.contract import State, StateFactory, StateUpdater

log = logging.getLogger(__name__)


class KafkaState(State):
    """One partition's producer; see the module doc."""

    def __init__(self, factory: "KafkaStateFactory", conf: Mapping[str, Any], context: Any, partition: int) -> None:
        from confluent_kafka import Producer

        self.factory = factory
        self.topic = factory.topic
        self.partition = partition
        name = conf.get(cfg.TOPOLOGY_NAME.name, "topology")
        producer_conf: dict[str, Any] = {"bootstrap.servers": factory.bootstrap_servers, "enable.idempotence": True,
                                         "acks": "all", "linger.ms": 5, "log_level": 4}
        producer_conf.update(factory.kafka_conf)
        self.transactional = factory.transactional
        if self.transactional:
            producer_conf["transactional.id"] = f"{factory.transactional_id_prefix}-{name}-{partition}"
        self.producer = new_client(Producer, producer_conf)
        if self.transactional:
            self.producer.init_transactions(30)   # fences a dead worker's producer, aborts its open batch
        self.txstate = getattr(context, "transactional_state", None)
        self.txid_path = f"kafka-state/{name}/{factory.topic}/{partition}"
        stored = self.txstate.get(self.txid_path) if self.txstate is not None else None
        self.last_txid: int = int(stored["txid"]) if isinstance(stored, dict) else -1
        self.txid: int | None = None
        self.skip = False
        self.errors: list[str] = []

    def begin_commit(self, txid: int) -> None:
        if self.transactional and self.txid is not None and not self.skip:
            self._abort()   # the previous attempt failed between begin_commit and commit
        self.txid = txid
        log.debug("KafkaState %s/%d: begin txid %d", self.topic, self.partition, txid)
        self.skip = txid <= self.last_txid
        self.errors = []
        if self.skip:
            log.info("KafkaState %s/%d: txid %d already committed, not written again", self.topic, self.partition, txid)
        elif self.transactional:
            self.producer.begin_transaction()

    def write(self, records: list[tuple[bytes | None, bytes | None]]) -> None:
        if self.skip:
            return
        headers = [("stormpy.txid", str(self.txid).encode())]

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        for key, value in records:
            while True:
                try:
                    self.producer.produce(self.topic, value=value, key=key, headers=headers, on_delivery=delivered)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)

    def commit(self, txid: int) -> None:
        if not self.skip:
            if self.transactional:
                try:
                    self.producer.commit_transaction(60)
                except Exception:
                    self._abort()
                    raise
            else:
                left = self.producer.flush(60)
                if left or self.errors:
                    raise RuntimeError(f"KafkaState: {left} records of txid {txid} undelivered, errors {self.errors[:3]}")
            self.last_txid = txid
            log.debug("KafkaState %s/%d: committed txid %d", self.topic, self.partition, txid)
            if self.txstate is not None:
                self.txstate.set(self.txid_path, {"txid": txid})
        self.txid = None

    def _abort(self) -> None:
        try:
            self.producer.abort_transaction(30)
        except Exception as exc:   # noqa: BLE001 - the transaction times out on the broker anyway
            log.warning("KafkaState %s/%d: abort failed: %s", self.topic, self.partition, exc)

    def close(self) -> None:
        if self.transactional and self.txid is not None and not self.skip:
            self._abort()
        self.producer.flush(10)


class KafkaStateFactory(StateFactory):
    def __init__(self, bootstrap_servers: str, topic: str, kafka_conf: Mapping[str, Any] | None = None,
                 transactional: bool = True, transactional_id_prefix: str = "stormpy") -> None:
        if not bootstrap_servers:
            raise ValueError("KafkaState: bootstrap_servers must be 'host:port[,host:port...]'")
        if not topic:
            raise ValueError("KafkaState: topic is required")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.kafka_conf = dict(kafka_conf or {})
        self.transactional = transactional
        self.transactional_id_prefix = transactional_id_prefix

    def make_state(self, conf: Any, context: Any, partition_index: int, num_partitions: int) -> State:
        return KafkaState(self, conf, context, partition_index)


def _factory(bootstrap_servers: str, topic: str, kafka_conf: Mapping[str, Any] | None = None,
             transactional: bool = True, transactional_id_prefix: str = "stormpy") -> KafkaStateFactory:
    """``KafkaState.factory(...)``: the StateFactory for ``partition_persist``."""
    return KafkaStateFactory(bootstrap_servers, topic, kafka_conf, transactional, transactional_id_prefix)


KafkaState.factory = staticmethod(_factory)  # type: ignore[attr-defined]


class KafkaStateUpdater(StateUpdater):
    """Writes each tuple as one record: key and value from ``mapper`` (default: fields ``key``, ``message``)."""

    def __init__(self, mapper: Any = None) -> None:
        self.mapper = mapper or FieldNameMapper()

    def update_state(self, state: State, tuples: list, collector: Any) -> None:
        assert isinstance(state, KafkaState)
        state.write([(_to_bytes(self.mapper.key(t)), _to_bytes(self.mapper.value(t))) for t in tuples])
