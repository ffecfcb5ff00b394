"""stormpy.trident: exactly-once, batch-at-a-time stream processing (DESIGN 7.1 names).

Everything a Trident topology file imports lives here. Each name is imported on first use, so that
importing Trident does not import PySpark (``SparkState``) or a connector, and so that code which
needs one module of a lower layer (a placement check of the planner, say) loads neither the API nor
the runtime.

The package is layered, top to bottom: ``api`` (TridentTopology, Stream), ``planner`` (graph,
validation, compilation into Storm components), ``runtime`` (bolts, coordinator, processors, and
the operation and spout classes they run), ``state`` (the State contract and its backends). A
layer imports only the layers below it (``tests/trident/test_trident_layout.py``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stormpy.trident import _moved

# What static tools see. The names of Spark and the connectors (SparkState, the Kafka and Redis
# Streams spouts) are not imported even here: those packages are built on Trident, a layer above
# it, and this face only names where their classes live for the spelling topology files use
# (``from stormpy.trident import OpaqueKafkaSpout``); static tools see them as Any.
if TYPE_CHECKING:
    from stormpy.trident.api.topology import GroupedStream, Stream, TridentState, TridentTopology
    from stormpy.trident.runtime.operations import (Aggregator, CombinerAggregator, Count, Filter, Function,
                                                    MapGet, QueryFunction, ReducerAggregator, Sum, TridentTuple)
    from stormpy.trident.runtime.spouts import BatchSpout, OpaquePartitionedSpout, PartitionedSpout
    from stormpy.trident.state.contract import BackingMap, State, StateFactory, StateUpdater
    from stormpy.trident.state.map_state import MapState, map_state_factory
    from stormpy.trident.state.memory import MemoryMapState
    from stormpy.trident.state.redis import RedisMapState
    from stormpy.trident.state.sqlite import SqliteMapState

__all__ = ["TridentTopology", "Stream", "GroupedStream", "TridentState", "BatchSpout", "PartitionedSpout",
           "OpaquePartitionedSpout", "Function", "Filter", "CombinerAggregator", "ReducerAggregator",
           "Aggregator", "Count", "Sum", "MapGet", "QueryFunction", "TridentTuple", "State", "StateFactory",
           "StateUpdater", "BackingMap", "MapState", "map_state_factory", "MemoryMapState", "SqliteMapState",
           "RedisMapState", "SparkState", "OpaqueKafkaSpout", "TransactionalKafkaSpout",
           "OpaqueRedisStreamSpout"]

_moved.install()   # the module paths of before the api/planner/runtime/state split still import

#: where each exported name is defined (the connectors' classes too: no cycle, no client import)
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["TridentTopology", "Stream", "GroupedStream", "TridentState"], "stormpy.trident.api.topology"),
    **dict.fromkeys(["Function", "Filter", "CombinerAggregator", "ReducerAggregator", "Aggregator", "Count", "Sum",
                     "MapGet", "QueryFunction", "TridentTuple"], "stormpy.trident.runtime.operations"),
    **dict.fromkeys(["BatchSpout", "PartitionedSpout", "OpaquePartitionedSpout"], "stormpy.trident.runtime.spouts"),
    **dict.fromkeys(["State", "StateFactory", "StateUpdater", "BackingMap"], "stormpy.trident.state.contract"),
    **dict.fromkeys(["MapState", "map_state_factory"], "stormpy.trident.state.map_state"),
    "MemoryMapState": "stormpy.trident.state.memory",
    "SqliteMapState": "stormpy.trident.state.sqlite",
    "RedisMapState": "stormpy.trident.state.redis",
    "SparkState": "stormpy.spark.trident_state",
    "OpaqueKafkaSpout": "stormpy.kafka.trident",
    "TransactionalKafkaSpout": "stormpy.kafka.trident",
    "OpaqueRedisStreamSpout": "stormpy.redis.streams",
}
#: submodules reachable as attributes of the package (``stormpy.trident.state.BackingMap``), old paths too
_SUBMODULES = frozenset(["api", "planner", "runtime", "state", *(old.rpartition(".")[2] for old in _moved.MOVED)])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module 'stormpy.trident' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
