"""Trident's planner: the graph the API records, its validation, and its compilation into Storm
components (and the placement checks Nimbus runs at submit). Imports the runtime and state
layers, never the API."""
