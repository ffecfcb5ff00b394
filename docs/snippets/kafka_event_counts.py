"""Count Kafka records per key: the connectors how-to's KafkaSpout topology (tests/kafka/test_kafka_docs.py runs it)."""
import os

from stormpy import Bolt, Topology
from stormpy.kafka import KafkaSpout, KafkaSpoutConfig, RetryPolicy

config = KafkaSpoutConfig(
    bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP", "localhost:9092"),
    topics=["events"],                              # or re.compile(r"events\..*")
    group_id="event-counter",
    first_poll_offset_strategy="UNCOMMITTED_EARLIEST",
    processing_guarantee="AT_LEAST_ONCE",
    offset_commit_period_ms=1000,
    retry=RetryPolicy(initial_delay_ms=100, delay_period_ms=100, max_retries=10),
    kafka_conf={"session.timeout.ms": 10000},       # any librdkafka setting
)

class CountEvents(Bolt):
    def initialize(self, conf, ctx):
        self.counts = {}

    def process(self, tup):                         # fields: topic, partition, offset, key, value
        self.counts[tup.values.key] = self.counts.get(tup.values.key, 0) + 1

class EventCounts(Topology):
    events = KafkaSpout(config).spec(par=2)
    counter = CountEvents.spec(inputs=[events])
