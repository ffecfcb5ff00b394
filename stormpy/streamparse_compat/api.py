"""What ``import streamparse`` gives when streamparse itself is not installed (see the package doc)."""
from __future__ import annotations

from stormpy import bolt, component, dsl, spout, storm, thrift
from stormpy.storm import (BatchingBolt, Bolt, Component, JavaBolt, JavaSpout, ReliableSpout, ShellBolt,
                           ShellSpout, Spout, StormHandler, TicklessBatchingBolt, Tuple)
from stormpy.topology.dsl import Grouping, Stream, Topology
from stormpy.version import __version__

VERSION = __version__

__all__ = ["BatchingBolt", "Bolt", "bolt", "component", "Component", "dsl", "Grouping", "JavaBolt", "JavaSpout",
           "ReliableSpout", "ShellBolt", "ShellSpout", "Spout", "spout", "storm", "StormHandler", "Stream",
           "thrift", "TicklessBatchingBolt", "Topology", "Tuple", "VERSION", "__version__"]
