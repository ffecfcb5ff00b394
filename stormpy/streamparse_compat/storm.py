"""Every component class in one module: streamparse's ``streamparse.storm`` and ``pystorm``."""
from __future__ import annotations

from stormpy.streamparse_compat.bolt import BatchingBolt, Bolt, JavaBolt, ShellBolt, TicklessBatchingBolt
from stormpy.streamparse_compat.component import Component, StormHandler
from stormpy.streamparse_compat.spout import JavaSpout, ReliableSpout, ShellSpout, Spout
from stormpy.api.tuple import Tuple
from stormpy.version import __version__

__all__ = ["BatchingBolt", "Bolt", "Component", "JavaBolt", "JavaSpout", "ReliableSpout", "ShellBolt",
           "ShellSpout", "Spout", "StormHandler", "TicklessBatchingBolt", "Tuple", "__version__"]
