"""stormpy.trident: exactly-once, batch-at-a-time stream processing (DESIGN 7.1 names).

The state layer (State, MapState, map_state_factory, MemoryMapState, SqliteMapState,
RedisMapState) lives in ``stormpy.trident.state`` and its backend modules; those names are
resolved lazily here so this package imports even where a backend's dependency is missing.
"""
from __future__ import annotations

import importlib
from typing import Any

from stormpy.trident.operations import (Aggregator, CombinerAggregator, Count, Filter, Function, MapGet,
                                        QueryFunction, ReducerAggregator, Sum, TridentTuple)
from stormpy.trident.spouts import BatchSpout, OpaquePartitionedSpout, PartitionedSpout
from stormpy.trident.topology import GroupedStream, Stream, TridentState, TridentTopology

# name -> modules that may define it (the state layer is built separately; first hit wins)
_STATE_MODULES = ("stormpy.trident.state", "stormpy.trident.memory_state", "stormpy.trident.sqlite_state",
                  "stormpy.trident.redis_state", "stormpy.trident.backends")
_STATE_NAMES = ("State", "StateFactory", "StateUpdater", "BackingMap", "MapState", "map_state_factory",
                "MemoryMapState", "SqliteMapState", "RedisMapState", "SparkState")

__all__ = ["TridentTopology", "Stream", "GroupedStream", "TridentState", "BatchSpout", "PartitionedSpout",
           "OpaquePartitionedSpout", "Function", "Filter", "CombinerAggregator", "ReducerAggregator",
           "Aggregator", "Count", "Sum", "MapGet", "QueryFunction", "TridentTuple", *_STATE_NAMES]


def __getattr__(name: str) -> Any:
    if name in _STATE_NAMES:
        for module_name in _STATE_MODULES:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            if hasattr(module, name):
                value = getattr(module, name)
                globals()[name] = value
                return value
        raise AttributeError(f"stormpy.trident.{name} is not available (the state layer does not define it)")
    raise AttributeError(f"module 'stormpy.trident' has no attribute {name!r}")
