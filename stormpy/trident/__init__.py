"""stormpy.trident: exactly-once, batch-at-a-time stream processing (DESIGN 7.1 names).

Everything a Trident topology file imports lives here. ``SparkState`` is resolved on first use
so that importing Trident does not import PySpark.
"""
from __future__ import annotations

import importlib
from typing import Any

from stormpy.trident import _moved
from stormpy.trident.state.memory import MemoryMapState
from stormpy.trident.runtime.operations import (Aggregator, CombinerAggregator, Count, Filter, Function, MapGet,
                                                QueryFunction, ReducerAggregator, Sum, TridentTuple)
from stormpy.trident.state.redis import RedisMapState
from stormpy.trident.runtime.spouts import BatchSpout, OpaquePartitionedSpout, PartitionedSpout
from stormpy.trident.state.sqlite import SqliteMapState
from stormpy.trident.state.contract import BackingMap, State, StateFactory, StateUpdater
from stormpy.trident.state.map_state import MapState, map_state_factory
from stormpy.trident.api.topology import GroupedStream, Stream, TridentState, TridentTopology

__all__ = ["TridentTopology", "Stream", "GroupedStream", "TridentState", "BatchSpout", "PartitionedSpout",
           "OpaquePartitionedSpout", "Function", "Filter", "CombinerAggregator", "ReducerAggregator",
           "Aggregator", "Count", "Sum", "MapGet", "QueryFunction", "TridentTuple", "State", "StateFactory",
           "StateUpdater", "BackingMap", "MapState", "map_state_factory", "MemoryMapState", "SqliteMapState",
           "RedisMapState", "SparkState", "OpaqueKafkaSpout", "TransactionalKafkaSpout",
           "OpaqueRedisStreamSpout"]

_moved.install()   # the module paths of before the api/planner/runtime/state split still import

#: connector classes ``stormpy.trident`` re-exports, imported on first use (no cycle, no client import)
_LAZY = {"SparkState": "stormpy.spark.trident_state", "OpaqueKafkaSpout": "stormpy.kafka.trident",
         "TransactionalKafkaSpout": "stormpy.kafka.trident", "OpaqueRedisStreamSpout": "stormpy.redis.streams"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'stormpy.trident' has no attribute {name!r}")
