"""Trident's user API: what a topology file builds with (TridentTopology, Stream, GroupedStream,
TridentState) and the state updaters ``persistent_aggregate`` uses. The top layer: it may import
the planner, the runtime and the state layers; none of them imports it.

The classes a user subclasses (operations, spouts, states) are defined in the layer that runs or
keeps them (``runtime.operations``, ``runtime.spouts``, ``state``), so the layers below never
import upwards; users import all of them from :mod:`stormpy.trident`.
"""
