"""Components that fail, for the ``stormpy local`` summary tests (issue 12); topologies in never_init.py, crash_loop.py."""
import time

from stormpy import Bolt, Spout, Topology


class NeverStarts(Spout):
    outputs = ["n"]

    def initialize(self, stormconf, context):
        raise RuntimeError("no database at db.invalid")

    def next_tuple(self):
        self.emit([1])


class CrashesAlways(Spout):
    outputs = ["n"]

    def next_tuple(self):
        raise KeyError("missing-field")


class Counter(Spout):
    outputs = ["n"]

    def initialize(self, stormconf, context):
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.emit([self.n], tup_id=self.n)
        time.sleep(0.001)


class Sink(Bolt):
    outputs = []

    def process(self, tup):
        pass
