"""A two-component topology the UI tests submit to a real Nimbus (it never needs to run)."""
from stormpy import Bolt, Grouping, Spout, Topology


class NumberSpout(Spout):
    outputs = ["n"]

    def initialize(self, stormconf, context):
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.emit([self.n], tup_id=self.n)


class PrintBolt(Bolt):
    outputs = []

    def process(self, tup):
        pass


class Numbers(Topology):
    config = {"topology.message.timeout.secs": 12}
    numbers = NumberSpout.spec(par=2)
    printer = PrintBolt.spec(inputs={numbers: Grouping.SHUFFLE}, par=3)
