"""Trident's runtime: the bolts, the master batch coordinator, the processors and the spout
sources that run in workers, and the operation and spout classes they run. Imports only the
state layer below it."""
