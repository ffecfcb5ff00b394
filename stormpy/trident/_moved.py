"""The module paths Trident had before its api/planner/runtime/state split, kept importable.

Users write ``from stormpy.trident.sqlite_state import SqliteMapState`` or ``stormpy.trident.spark_state``,
and topologies submitted before the split keep pickles (in ZooKeeper and on Nimbus) naming classes as
``stormpy.trident.bolts:TridentBolt`` or ``stormpy.trident.redis_state._restore``. Importing an old
path imports the module at its new path and registers that same module object under the old name
too (a ``sys.modules`` alias), so every name, private ones included, resolves and ``isinstance``
holds whichever spelling made the object. Nothing is imported until an old path is asked for, and
the finder answers only the names in :data:`MOVED` (it sits last on ``sys.meta_path``).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

#: old module path -> where that module lives now (``stormpy.trident.state`` is a package now: it
#: re-exports the old module's names itself, so it needs no alias)
MOVED: dict[str, str] = {
    "stormpy.trident.topology": "stormpy.trident.api.topology",
    "stormpy.trident.updaters": "stormpy.trident.api.updaters",
    "stormpy.trident.graph": "stormpy.trident.planner.graph",
    "stormpy.trident.compile": "stormpy.trident.planner.compile",
    "stormpy.trident.validate": "stormpy.trident.planner.validate",
    "stormpy.trident.placement": "stormpy.trident.planner.placement",
    "stormpy.trident.bolts": "stormpy.trident.runtime.bolts",
    "stormpy.trident.coordinator": "stormpy.trident.runtime.coordinator",
    "stormpy.trident.processors": "stormpy.trident.runtime.processors",
    "stormpy.trident.batch": "stormpy.trident.runtime.batch",
    "stormpy.trident.spouts": "stormpy.trident.runtime.spouts",
    "stormpy.trident.stats": "stormpy.trident.runtime.stats",
    "stormpy.trident.operations": "stormpy.trident.runtime.operations",
    "stormpy.trident.memory_state": "stormpy.trident.state.memory",
    "stormpy.trident.sqlite_state": "stormpy.trident.state.sqlite",
    "stormpy.trident.redis_state": "stormpy.trident.state.redis",
    "stormpy.trident.txstate": "stormpy.trident.state.txstate",
    # SparkState is a state of the Spark connector, which depends on Trident (not the reverse)
    "stormpy.trident.spark_state": "stormpy.spark.trident_state",
}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of :data:`MOVED` and loads it as the module at its new path."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__   # importlib overwrites module.__spec__ with ours next
        return module

    def exec_module(self, module: ModuleType) -> None:
        alias_spec = module.__spec__
        assert alias_spec is not None
        module.__spec__ = alias_spec.loader_state   # the module keeps its own spec (name, origin)


def install() -> None:
    """Puts the finder last on ``sys.meta_path`` (once): real modules of these paths, if any, win."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
