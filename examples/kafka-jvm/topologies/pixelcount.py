"""
Pixel count topology (streamparse's examples/kafka-jvm), with stormpy's KafkaSpout in place of
the JVM one: the only changed lines are the spout's and its import.
"""
import os

from streamparse import Grouping, Topology

from stormpy.kafka import KafkaSpout, KafkaSpoutConfig

from bolts.pixel_count import PixelCounterBolt
from bolts.pixel_deserializer import PixelDeserializerBolt


class PixelCount(Topology):
    # was: JavaSpout.spec(name="pixel-spout", full_class_name="pixelcount.spouts.PixelSpout", args_list=[], outputs=["pixel"])
    pixel_spout = KafkaSpout(KafkaSpoutConfig(bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP", "localhost:9092"), topics=["pixels"], group_id="pixelcount", record_translator=(lambda record: [record.value().decode()], ["pixel"]))).spec(name="pixel-spout")
    pixel_deserializer = PixelDeserializerBolt.spec(name="pixel-deserializer-bolt", inputs=[pixel_spout])
    pixel_counter = PixelCounterBolt.spec(name="pixel-count-bolt",
                                          inputs={pixel_deserializer: Grouping.fields("url")},
                                          config={"topology.tick.tuple.freq.secs": 1})
