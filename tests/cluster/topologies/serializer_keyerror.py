"""A topology whose registered serializer raises KeyError for some tuples (issue 26, item 7).

The spout emits ``Amount(i, attempt)`` for ``i = 0, 1, 2, ...`` (reliable, ``tup_id=i``); the
serializer registered for ``Amount`` raises KeyError on the first attempt of every id ending in
3 or 8 (``ident % 5 == 3``: consecutive poisoned ids fall on every residue mod 4, so with shuffle
grouping's round-robin over the 4 check tasks, Storm 2's order, some go to the other worker
whatever the order was shuffled to), so such a tuple cannot leave its worker: it must be failed (the spout re-emits it with the next
attempt number) while the others flow. Acked and failed ids go to ``acked-<i>.txt`` and
``failed-<i>.txt`` in ``test.out.dir``.
"""
from collections import deque
from pathlib import Path

from stormpy import Bolt, Grouping, Spout, Topology


class Amount:
    def __init__(self, ident: int, attempt: int) -> None:
        self.ident = ident
        self.attempt = attempt


class AmountSerializer:
    def serialize(self, amount: Amount) -> bytes:
        if amount.ident % 5 == 3 and amount.attempt == 0:
            rates = {"EUR": 1}
            return rates[f"rate-of-{amount.ident}"]   # KeyError: a bug in user code
        return amount.ident.to_bytes(8, "big") + amount.attempt.to_bytes(2, "big")

    def deserialize(self, data: bytes) -> Amount:
        return Amount(int.from_bytes(data[:8], "big"), int.from_bytes(data[8:], "big"))


class AmountSpout(Spout):
    outputs = ["amount"]

    def initialize(self, stormconf, context):
        out = Path(stormconf["test.out.dir"])
        out.mkdir(parents=True, exist_ok=True)
        self.acked = open(out / f"acked-{context.task_index}.txt", "a")
        self.failed = open(out / f"failed-{context.task_index}.txt", "a")
        self.next_id = context.task_index
        self.step = len(context.component_tasks)
        self.replay = deque()
        self.attempts = {}

    def next_tuple(self):
        if self.replay:
            ident = self.replay.popleft()
        else:
            ident, self.next_id = self.next_id, self.next_id + self.step
        self.emit([Amount(ident, self.attempts.get(ident, 0))], tup_id=ident)

    def ack(self, tup_id):
        self.attempts.pop(tup_id, None)
        self.acked.write(f"{tup_id}\n")
        self.acked.flush()

    def fail(self, tup_id):
        self.attempts[tup_id] = self.attempts.get(tup_id, 0) + 1
        self.failed.write(f"{tup_id}\n")
        self.failed.flush()
        self.replay.append(tup_id)


class CheckBolt(Bolt):
    outputs = []

    def process(self, tup):
        amount = tup.values[0]
        if not isinstance(amount, Amount):
            raise TypeError(f"expected an Amount, got {type(amount).__name__}")


class SerializerKeyError(Topology):
    config = {"topology.serializers": {"Amount": "serializer_keyerror:AmountSerializer"},
              "topology.max.spout.pending": 40,
              "topology.message.timeout.secs": 300}   # a replay within the test is a fail, not a timeout
    amounts = AmountSpout.spec(par=1)
    check = CheckBolt.spec(inputs={amounts: Grouping.SHUFFLE}, par=4)
