"""A streamparse-style topology, written the way pystorm users write them (no test helpers):
a replaying spout over numbered transfers, a bolt that explicitly fails some tuples the first
time it sees them, and a fields-grouped ledger bolt. The spout appends acked ids to
``<ledger.out.dir>/acked-<task>.txt`` and skips them after a restart."""
import os
from collections import defaultdict

from stormpy import Bolt, Grouping, Spout, Topology


class TransferSpout(Spout):
    outputs = ["transfer_id", "account", "amount"]

    def initialize(self, stormconf, context):
        self.total = int(stormconf["ledger.transfers"])
        out = stormconf["ledger.out.dir"]
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, "acked-%d.txt" % context.task_index)
        done = set()
        if os.path.exists(path):
            with open(path) as f:
                done = {int(line) for line in f if line.strip()}
        self.log_file = open(path, "a")
        n = len(context.component_tasks)
        self.queue = [i for i in range(context.task_index, self.total, n) if i not in done][::-1]
        self.pending = {}

    def next_tuple(self):
        if not self.queue:
            return
        i = self.queue.pop()
        self.pending[i] = ["acct-%d" % (i % 13), i % 100]
        self.emit([i] + self.pending[i], tup_id=i)

    def ack(self, tup_id):
        self.pending.pop(tup_id, None)
        self.log_file.write("%d\n" % tup_id)
        self.log_file.flush()

    def fail(self, tup_id):
        if tup_id in self.pending:
            self.queue.append(tup_id)


class FlakyBolt(Bolt):
    outputs = ["account", "amount", "transfer_id"]
    auto_ack = False

    def initialize(self, conf, ctx):
        self.seen = set()

    def process(self, tup):
        transfer_id, account, amount = tup.values
        if transfer_id % 7 == 0 and transfer_id not in self.seen:
            self.seen.add(transfer_id)
            self.fail(tup)
            return
        self.emit([account, amount, transfer_id], anchors=[tup])
        self.ack(tup)


class LedgerBolt(Bolt):
    outputs = []

    def initialize(self, conf, ctx):
        self.balances = defaultdict(int)

    def process(self, tup):
        self.balances[tup.values.account] += tup.values.amount


class Ledger(Topology):
    config = {"topology.message.timeout.secs": 10, "topology.max.spout.pending": 100}
    transfers = TransferSpout.spec(par=2)
    flaky = FlakyBolt.spec(inputs=[transfers], par=2)
    ledger = LedgerBolt.spec(inputs={flaky: Grouping.fields("account")}, par=3)
