"""stormpy: Apache Storm, rebuilt in Python.

The user API is streamparse/pystorm-compatible: ``from stormpy import Spout, Bolt, Topology``.

The names below are imported on first use (PEP 562): every ``stormpy.x`` import runs this
file first, and the daemons (Nimbus, supervisor, UI) must not pull the user API and the
engine in with it. Importing stormpy registers the finder that answers streamparse's module
paths (``stormpy.bolt``, ``streamparse.bolt``, ``pystorm``, ...; see
:mod:`stormpy.streamparse_compat`), which imports nothing until such a name is imported.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stormpy.streamparse_compat import register as _register_streamparse_paths
from stormpy.version import __version__

if TYPE_CHECKING:
    from stormpy.api.component import BatchingBolt, Bolt, Spout, TicklessBatchingBolt
    from stormpy.api.dsl import Grouping, Stream, Topology
    from stormpy.api.tuple import Tuple
    from stormpy.stateful.bolt import StatefulBolt
    from stormpy.stateful.windowed import StatefulWindowedBolt
    from stormpy.windowing.bolt import WindowedBolt

_register_streamparse_paths()

#: public name -> the module that defines it.
_LAZY: dict[str, str] = {
    "BatchingBolt": "stormpy.api.component",
    "Bolt": "stormpy.api.component",
    "Spout": "stormpy.api.component",
    "TicklessBatchingBolt": "stormpy.api.component",
    "Grouping": "stormpy.api.dsl",
    "Stream": "stormpy.api.dsl",
    "Topology": "stormpy.api.dsl",
    "Tuple": "stormpy.api.tuple",
    "StatefulBolt": "stormpy.stateful.bolt",
    "StatefulWindowedBolt": "stormpy.stateful.windowed",
    "WindowedBolt": "stormpy.windowing.bolt",
}

__all__ = ["BatchingBolt", "Bolt", "Grouping", "Spout", "StatefulBolt", "StatefulWindowedBolt", "Stream",
           "TicklessBatchingBolt", "Topology", "Tuple", "WindowedBolt", "__version__"]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and keep the name here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stormpy' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
