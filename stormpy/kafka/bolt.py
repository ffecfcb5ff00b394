"""KafkaBolt: writes tuples to Kafka (storm-kafka-client's KafkaBolt) and acks them once stored.

``KafkaBolt(bootstrap_servers, topic=..., mapper=...)``: the topic comes from a selector (a
topic name, or a function of the tuple returning one, or None to skip the tuple), key and
value from a mapper (default: the tuple's ``key`` and ``message`` fields, Storm's
``FieldNameBasedTupleToKafkaMapper``; str values are UTF-8 encoded). A tuple is acked only
when the broker confirmed its record (librdkafka's delivery report), and failed when the
delivery failed (after librdkafka's own retries, within ``message.timeout.ms``), so the spout
replays it. ``fire_and_forget=True`` acks right after handing the record to librdkafka.

Delivery reports are served by ``producer.poll`` on the executor thread: after each tuple
and every ``timer_interval_secs``. The producer is idempotent with ``acks=all`` unless
``kafka_conf`` says otherwise.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from stormpy.api.component import Bolt
from stormpy.kafka.config import new_client

log = logging.getLogger(__name__)


class FieldNameMapper:
    """Key and value from two fields of the tuple (Storm's names: ``key`` and ``message``)."""

    def __init__(self, key_field: str | None = "key", value_field: str = "message") -> None:
        self.key_field = key_field
        self.value_field = value_field

    @staticmethod
    def _fields(tup: Any) -> list[str]:
        """A bolt's Tuple (values: a namedtuple) or a TridentTuple (``fields``)."""
        fields = getattr(tup, "fields", None)
        return list(fields) if fields is not None else list(getattr(tup.values, "_fields", ()))

    def key(self, tup: Any) -> Any:
        if self.key_field is None:
            return None
        fields = self._fields(tup)
        return tup.values[fields.index(self.key_field)] if self.key_field in fields else None

    def value(self, tup: Any) -> Any:
        fields = self._fields(tup)
        if self.value_field in fields:
            return tup.values[fields.index(self.value_field)]
        return tup.values[-1]   # no 'message' field: the last one


def _to_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return str(value).encode("utf-8")


class KafkaBolt(Bolt):
    """A producer bolt; see the module doc. Declared by instance: ``KafkaBolt(...).spec(inputs=...)``."""

    auto_ack = False
    auto_fail = False
    outputs: Any = []
    timer_interval_secs = 0.05

    def __init__(self, bootstrap_servers: str, topic: str | Callable[[Any], str | None],
                 mapper: Any = None, kafka_conf: Mapping[str, Any] | None = None,
                 fire_and_forget: bool = False) -> None:
        if not bootstrap_servers:
            raise ValueError("KafkaBolt: bootstrap_servers must be 'host:port[,host:port...]'")
        if not (isinstance(topic, str) and topic) and not callable(topic):
            raise ValueError(f"KafkaBolt: topic must be a topic name or a function of the tuple, given {topic!r}")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.mapper = mapper or FieldNameMapper()
        self.kafka_conf = dict(kafka_conf or {})
        self.fire_and_forget = fire_and_forget

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        from confluent_kafka import Producer

        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "enable.idempotence": True,
                                "acks": "all", "linger.ms": 5, "log_level": 4}
        conf.update(self.kafka_conf)
        self.producer = new_client(Producer, conf)
        self.waiting = 0

    def process(self, tup: Any) -> None:
        topic = self.topic(tup) if callable(self.topic) else self.topic
        if topic is None:
            self.ack(tup)   # the selector skipped it (Storm's selector returning null)
            return
        key = _to_bytes(self.mapper.key(tup))
        value = _to_bytes(self.mapper.value(tup))

        def delivered(err: Any, msg: Any) -> None:
            self.waiting -= 1
            if self.fire_and_forget:
                if err is not None:
                    log.warning("KafkaBolt: a record for %s was not delivered: %s", topic, err)
                return
            if err is None:
                self.ack(tup)
            else:
                self.metrics.incr("kafka-delivery-failures")
                log.warning("KafkaBolt: delivery to %s failed, failing the tuple: %s", topic, err)
                self.fail(tup)

        while True:
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=delivered)
                break
            except BufferError:   # librdkafka's queue is full: let deliveries drain it
                self.producer.poll(0.05)
        self.waiting += 1
        if self.fire_and_forget:
            self.ack(tup)
        self.producer.poll(0)

    def on_timer(self) -> None:
        if self.waiting:
            self.producer.poll(0)

    def close(self) -> None:
        producer = getattr(self, "producer", None)
        if producer is not None:
            # tuples still waiting are acked or failed by the delivery reports flush serves
            left = producer.flush(10)
            if left:
                log.warning("KafkaBolt: %d records still undelivered at close (their tuples time out)", left)
