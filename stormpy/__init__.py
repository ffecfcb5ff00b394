"""stormpy: Apache Storm, rebuilt in Python.

The user API is streamparse/pystorm-compatible: ``from stormpy import Spout, Bolt, Topology``.
"""
from __future__ import annotations

from stormpy.stateful.bolt import StatefulBolt  # noqa: E402
from stormpy.stateful.windowed import StatefulWindowedBolt  # noqa: E402
from stormpy.api.component import BatchingBolt, Bolt, Spout, TicklessBatchingBolt  # noqa: E402
from stormpy.api.tuple import Tuple  # noqa: E402
from stormpy.api.dsl import Grouping, Stream, Topology  # noqa: E402
from stormpy.version import __version__  # noqa: E402
from stormpy.windowing.bolt import WindowedBolt  # noqa: E402

__all__ = ["BatchingBolt", "Bolt", "Grouping", "Spout", "StatefulBolt", "StatefulWindowedBolt", "Stream", "TicklessBatchingBolt", "Topology", "Tuple",
           "WindowedBolt", "__version__"]
