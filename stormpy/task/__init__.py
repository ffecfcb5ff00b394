"""Executors and the user API: what runs tasks inside a worker (or ``stormpy local``).

- ``component``: Spout, Bolt, BatchingBolt, TicklessBatchingBolt (the streamparse-compatible API)
- ``tuple``: Tuple and the per-stream namedtuple classes of ``tup.values``
- ``grouping``: routing from Thrift Grouping objects to task ids
- ``executor`` / ``spout_executor`` / ``bolt_executor``: one thread per task range
- ``stats``: per-executor counters with Storm's rolling windows
- ``context``: TopologyContext handed to ``initialize``
- ``runtime``: WorkerRuntime, the executors of one worker process
"""
