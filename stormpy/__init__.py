"""stormpy: Apache Storm, rebuilt in Python.

The user API is streamparse/pystorm-compatible: ``from stormpy import Spout, Bolt, Topology``.
"""
from __future__ import annotations

__version__ = "0.1.0"

from stormpy.topology.dsl import Grouping, Stream, Topology  # noqa: E402

__all__ = ["Grouping", "Stream", "Topology", "__version__"]
