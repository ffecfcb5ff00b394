"""Every component class in one module: streamparse's ``streamparse.storm`` and ``pystorm``."""
from __future__ import annotations

from stormpy.bolt import BatchingBolt, Bolt, JavaBolt, ShellBolt, TicklessBatchingBolt
from stormpy.component import Component, StormHandler
from stormpy.spout import JavaSpout, ReliableSpout, ShellSpout, Spout
from stormpy.task.tuple import Tuple
from stormpy.version import __version__

__all__ = ["BatchingBolt", "Bolt", "Component", "JavaBolt", "JavaSpout", "ReliableSpout", "ShellBolt",
           "ShellSpout", "Spout", "StormHandler", "TicklessBatchingBolt", "Tuple", "__version__"]
