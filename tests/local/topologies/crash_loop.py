"""A spout that raises in every next_tuple next to a healthy chain."""
from broken_parts import Counter, CrashesAlways, Sink

from stormpy import Topology


class CrashLoop(Topology):
    config = {"topology.task.restart.backoff.secs": 0.05}
    good = Counter.spec()
    sink = Sink.spec(inputs=[good])
    looping = CrashesAlways.spec(par=2)
