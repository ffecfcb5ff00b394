"""Trident's runtime: the bolts, the master batch coordinator, the processors and the spout
sources that run in workers, and the operation and spout base classes they run (users import
those from :mod:`stormpy.trident`). Imports only the state layer below it."""
