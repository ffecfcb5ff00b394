"""The topology DSL at streamparse's module path (``streamparse.dsl`` and its submodules)."""
from __future__ import annotations

from stormpy.thrift import storm
from stormpy.api.dsl import ComponentSpec, Grouping, GroupingSpec, Stream, Topology, TopologyType

GlobalStreamId = storm.GlobalStreamId

__all__ = ["ComponentSpec", "GlobalStreamId", "Grouping", "GroupingSpec", "Stream", "Topology", "TopologyType"]
