"""The ``__acker`` system bolt: applies ack messages to a Ledger and answers the spouts.

Plans name it ``stormpy.acker.bolt:AckerBolt``. It runs in an ordinary bolt executor, but
with a raw-batch driver (``make_driver``) instead of one Tuple at a time: acker traffic is
two or three messages per tuple tree and must stay cheap, so the ledger applies a whole
batch in one loop (``Ledger.apply_batch``) and the answers go straight to the spout tasks. Timeouts rotate the ledger from the executor's timer
(``on_timer``, on the executor thread), every ``topology.message.timeout.secs / (buckets - 1)`` seconds.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from stormpy.acker.ledger import ACKED, Ledger
from stormpy.api.contract import BoltOutputCollector
from stormpy.streams import ACK_ACK, ACK_FAIL
from stormpy.api.component import Bolt
from stormpy.task.drivers import Driver, RawBatchDriver
from stormpy.task.settings import ExecutorSettings

log = logging.getLogger(__name__)

_BUCKETS = 3


class AckerBolt(Bolt):
    """XOR tracking of tuple trees for the spout tasks that chose this acker task."""

    outputs: list[str] = []
    auto_ack = False
    auto_anchor = False
    auto_fail = False

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        self.task_id = context.task_id if context is not None else 0
        timeout = ExecutorSettings.from_conf(stormconf).message_timeout_secs
        self.timer_interval_secs = timeout / (_BUCKETS - 1)
        self.ledger = Ledger(_BUCKETS)
        self.acked_trees = 0
        self.failed_trees = 0

    def make_driver(self, task: BoltOutputCollector) -> Driver:
        """Whole batches of acker messages; the answers go to the spout tasks as they are."""
        send = task.send

        def on_batch(messages: list[Any]) -> None:
            for dest, answer in self.process_messages(messages):
                send(dest, answer)

        # joined batches: the acker runs no user code, and a crash of its own loses its ledger anyway
        return RawBatchDriver(on_batch, joins=True)

    def process_messages(self, messages: list[Any]) -> list[tuple[int, Any]]:
        """Apply a batch of acker messages; return (spout task, answer message) pairs."""
        out: list[tuple[int, Any]] = []
        task_id = self.task_id
        acked: dict[int, list[int]] = {}  # spout task -> its completed roots: one answer each
        for verdict, root, spout_task in self.ledger.apply_batch(messages, self._on_unknown):
            if verdict is ACKED:
                roots = acked.get(spout_task)
                if roots is None:
                    acked[spout_task] = [root]
                else:
                    roots.append(root)
            else:
                self.failed_trees += 1
                out.append((spout_task, (ACK_FAIL, task_id, [root], None)))
        for spout_task, roots in acked.items():
            self.acked_trees += len(roots)
            out.append((spout_task, (ACK_ACK, task_id, roots, None)))
        return out

    def _on_unknown(self, message: Any) -> None:
        log.warning("acker: unknown stream %r from task %r", message[0], message[1])

    def on_timer(self) -> None:
        expired = self.ledger.rotate()
        if expired:
            log.debug("acker task %d: %d tuple trees expired", self.task_id, len(expired))
        self.metrics.set("pending_trees", len(self.ledger))
        self.metrics.set("acked_trees", self.acked_trees)
        self.metrics.set("failed_trees", self.failed_trees)
