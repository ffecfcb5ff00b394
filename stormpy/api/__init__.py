"""The user API: what a topology's code subclasses, declares and calls.

- ``component``: Component, Spout, ReliableSpout, Bolt, BatchingBolt, TicklessBatchingBolt
- ``tuple``: Tuple and the per-stream namedtuple classes of ``tup.values``
- ``foreign``: ShellBolt/ShellSpout (multilang) and JavaBolt/JavaSpout (refused at submit)
- ``dsl``: the Topology class, its component specs, streams and groupings
- ``compile``: a Topology class -> the ``StormTopology`` Thrift struct (names user classes)
- ``loader``: a topology file -> its Topology class
- ``flux``: ``Topology.to_flux_dict``

The engine (``stormpy.task``, the worker) imports this package; this package imports only
the pure model below it (``stormpy.topology``, ``stormpy.streams``, ``stormpy.thrift``,
``stormpy.config``), never the engine, and the daemons never import it. Users import these
names from ``stormpy`` (``from stormpy import Bolt``) or by streamparse's paths.
"""
