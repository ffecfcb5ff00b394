"""A spout that never initializes next to a healthy chain."""
from broken_parts import Counter, NeverStarts, Sink

from stormpy import Topology


class NeverInitialized(Topology):
    config = {"topology.task.restart.backoff.secs": 0.05}
    good = Counter.spec()
    sink = Sink.spec(inputs=[good])
    broken = NeverStarts.spec(par=2)
