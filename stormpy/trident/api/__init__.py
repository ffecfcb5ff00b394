"""Trident's user API: what a topology file builds with (TridentTopology, Stream) and the state
updaters ``persistent_aggregate`` uses. The top layer: it may import the planner, the runtime and
the state layers; none of them imports it."""
