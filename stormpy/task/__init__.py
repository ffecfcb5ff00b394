"""The engine: what runs tasks inside a worker (or ``stormpy local``).

- ``drivers``: how a bolt task's input reaches its component (per tuple, batching, raw batches)
- ``tree``: the tuple-tree arithmetic (start, extend, settle, fail, flush) and the fast emit paths
- ``emit``: the general emit path, its checks and the outbox
- ``grouping``: routing from Thrift Grouping objects to task ids
- ``executor`` / ``spout_executor`` / ``bolt_executor``: one thread per task range
- ``scheduler``: ExecutorLoop, the executors of one process taking turns on one thread
  (``topology.executor.threads``; the default in ``stormpy local``)
- ``stats``: per-executor counters with Storm's rolling windows
- ``context``: TopologyContext handed to ``initialize``
- ``runtime``: WorkerRuntime, the executors of one worker process

The components it runs are written against the user API (``stormpy.api``), which this
package imports and which never imports it.
"""


def tuple_path_build() -> str:
    """Which build of the tuple path this process runs, for figures that depend on it: the
    benchmarks print it beside theirs (``STORMPY_COMPILE=1`` installs the compiled one)."""
    from stormpy.task import tree
    return "pure Python" if tree.__file__.endswith(".py") else "compiled (Cython)"
