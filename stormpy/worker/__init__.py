"""The worker process (``python -m stormpy.worker``): one topology's executors on one port.

``worker.Worker`` wires the engine's ``WorkerRuntime`` to ZooKeeper (assignment, status,
heartbeats, errors) and to ``transfer.ZmqTransfer``, the ZeroMQ transport between workers.
"""
