"""What ``import streamparse`` gives when streamparse itself is not installed (see the package doc)."""
from __future__ import annotations

from stormpy import thrift
from stormpy.streamparse_compat import bolt, component, dsl, spout, storm
from stormpy.streamparse_compat.storm import (BatchingBolt, Bolt, Component, JavaBolt, JavaSpout, ReliableSpout,
                                              ShellBolt, ShellSpout, Spout, StormHandler, TicklessBatchingBolt, Tuple)
from stormpy.api.dsl import Grouping, Stream, Topology
from stormpy.version import __version__

VERSION = __version__

__all__ = ["BatchingBolt", "Bolt", "bolt", "component", "Component", "dsl", "Grouping", "JavaBolt", "JavaSpout",
           "ReliableSpout", "ShellBolt", "ShellSpout", "Spout", "spout", "storm", "StormHandler", "Stream",
           "thrift", "TicklessBatchingBolt", "Topology", "Tuple", "VERSION", "__version__"]
