"""stormpy.kafka: Kafka in and out, with storm-kafka-client's names (client: confluent-kafka).

- :class:`KafkaSpout` with :class:`KafkaSpoutConfig`: a core spout over a consumer group
  (at-least-once by default: offsets committed only up to the lowest un-acked record).
- :class:`KafkaBolt`: a producer bolt that acks its input once the broker confirmed the write.
- :class:`OpaqueKafkaSpout` / :class:`TransactionalKafkaSpout`: Trident spouts, one Trident
  partition per Kafka partition (also exported by ``stormpy.trident``).
- :class:`KafkaState` (``KafkaState.factory(...)``) with :class:`KafkaStateUpdater`: Trident
  ``partition_persist`` into a topic, one Kafka transaction per batch.

confluent-kafka is imported when a component starts, so topology files import this package
on machines without it (a submit host, Nimbus).
"""
from __future__ import annotations

from stormpy.kafka.config import (FirstPollOffsetStrategy, KafkaSpoutConfig, ProcessingGuarantee, RecordTranslator,
                                  RetryPolicy)
from stormpy.kafka.bolt import FieldNameMapper, KafkaBolt
from stormpy.kafka.spout import KafkaSpout
from stormpy.kafka.state import KafkaState, KafkaStateFactory, KafkaStateUpdater
from stormpy.kafka.trident import OpaqueKafkaSpout, TransactionalKafkaSpout

__all__ = ["KafkaSpout", "KafkaBolt", "FieldNameMapper", "KafkaSpoutConfig", "FirstPollOffsetStrategy", "ProcessingGuarantee", "RecordTranslator",
           "RetryPolicy", "OpaqueKafkaSpout", "TransactionalKafkaSpout", "KafkaState",
           "KafkaStateFactory", "KafkaStateUpdater"]
