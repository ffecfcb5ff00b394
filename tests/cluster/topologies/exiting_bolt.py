"""A bolt that calls ``sys.exit()`` on its first tuple, once per ``test.out.dir`` (issue 26,
item 7): SystemExit is not an Exception, so it escapes every user-code guard and ends its
executor thread. The worker must report that and exit (code 3) so the supervisor restarts it;
after the restart the marker file exists and the bolt works. The spout records acked ids."""
import sys
from pathlib import Path

from stormpy import Bolt, Grouping, Spout, Topology


class CountingSpout(Spout):
    outputs = ["n"]

    def initialize(self, stormconf, context):
        self.out = Path(stormconf["test.out.dir"])
        self.out.mkdir(parents=True, exist_ok=True)
        self.acked = open(self.out / "acked.txt", "a")
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.emit([self.n], tup_id=self.n)

    def ack(self, tup_id):
        self.acked.write(f"{tup_id}\n")
        self.acked.flush()


class ExitingBolt(Bolt):
    outputs = []

    def initialize(self, stormconf, context):
        self.marker = Path(stormconf["test.out.dir"]) / "exited-once"

    def process(self, tup):
        if not self.marker.exists():
            self.marker.write_text("bye\n")
            sys.exit("the bolt called sys.exit()")


class ExitingBoltTopology(Topology):
    config = {"topology.max.spout.pending": 20}
    numbers = CountingSpout.spec(par=1)
    exiting = ExitingBolt.spec(inputs={numbers: Grouping.SHUFFLE}, par=1)
