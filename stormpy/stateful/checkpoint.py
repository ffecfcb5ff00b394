"""Storm's checkpoint protocol: the transaction table, the checkpoint spout, the wiring.

The checkpoint spout (``$checkpointspout``, one task, added at compile time to every
topology with a stateful bolt: ``stormpy.api.compile.add_checkpointing``) emits ``[txid, action]`` on ``$checkpoint`` to every
stateful bolt task (all grouping), with ``tup_id=txid`` so the acker tracks it. A bolt
acks the checkpoint tuple when it has done the action, so the tree completing means every
stateful bolt did it: after PREPARE, that every bolt has prepared, and only then does the
spout move to COMMIT. A failed or timed-out step puts the spout into recovery: ROLLBACK
(every bolt drops its prepared state and fails its uncommitted tuples, which replay) then
INITSTATE. A new spout (a new topology, or its worker restarted) also starts in recovery,
so a re-created bolt always receives INITSTATE before it processes a tuple.

The spout's position (txid and phase) is kept in the topology's ``TransactionalState``
(ZooKeeper in a cluster, memory under ``stormpy local``) at ``checkpoint/<component>``.

The table below is Storm's ``CheckPointState`` (``nextAction``/``nextState``), pure.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.streams import CHECKPOINT_STREAM
from stormpy.api.component import Spout
from stormpy.api.dsl import Stream

log = logging.getLogger(__name__)

# actions on the $checkpoint stream
PREPARE, COMMIT, ROLLBACK, INITSTATE = "PREPARE", "COMMIT", "ROLLBACK", "INITSTATE"
# phases of the spout's transaction
COMMITTED, PREPARING, COMMITTING = "COMMITTED", "PREPARING", "COMMITTING"

#: (phase, recovering) -> the action to emit for the current txid.
NEXT_ACTION: dict[tuple[str, bool], str] = {
    (PREPARING, True): ROLLBACK,
    (PREPARING, False): COMMIT,
    (COMMITTING, True): COMMIT,
    (COMMITTING, False): COMMIT,
    (COMMITTED, True): INITSTATE,
    (COMMITTED, False): PREPARE,
}


def next_state(txid: int, phase: str, recovering: bool) -> tuple[int, str]:
    """Where the transaction goes once the action of ``(txid, phase)`` was acked everywhere."""
    if phase == COMMITTED:
        return (txid, COMMITTED) if recovering else (txid + 1, PREPARING)
    if phase == PREPARING:
        return (txid - 1, COMMITTED) if recovering else (txid, COMMITTING)
    return (txid, COMMITTED)   # COMMITTING


class CheckpointSpout(Spout):
    """Drives checkpoints every ``topology.state.checkpoint.interval.ms`` (one task).

    Checkpoints run from the executor's timer, not ``next_tuple``: they go on while the
    topology is deactivated, so tuples held by stateful bolts are committed and acked when a
    topology drains (deactivate, kill, ``stormpy local`` stopping) instead of timing out.
    """

    outputs = [Stream(fields=["txid", "action"], name=CHECKPOINT_STREAM)]
    timer_interval_secs = 0.02

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        self.interval_secs = int(cfg.read(stormconf, cfg.TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS)) / 1000.0
        self.store = context.transactional_state
        self.path = f"checkpoint/{context.component_id}"
        saved = self.store.get(self.path) if self.store is not None else None
        self.txid, self.phase = (int(saved["txid"]), saved["phase"]) if saved else (0, COMMITTED)
        self.recovering = True        # Storm: a new spout recovers first (bolts need INITSTATE)
        self.in_progress = False
        self.last_checkpoint = 0.0
        # A fresh topology starting at txid 0 is not news; resuming a saved txid is.
        log.log(logging.INFO if saved else logging.DEBUG, "checkpoint spout: starting at txid %d (%s), recovering",
                self.txid, self.phase)

    def next_tuple(self) -> None:
        """Nothing: see ``on_timer``."""

    def on_timer(self) -> None:
        if self.in_progress:
            return
        now = time.monotonic()
        if not self.recovering and self.phase == COMMITTED and now - self.last_checkpoint < self.interval_secs:
            return
        if self.recovering and now - self.last_checkpoint < min(self.interval_secs, 0.1):
            return   # a failed step: retry soon, not in a tight loop
        action = NEXT_ACTION[(self.phase, self.recovering)]
        if action == PREPARE:
            self.last_checkpoint = now
            self._save(self.txid + 1, PREPARING)   # Storm saves PREPARING before sending it
            self.phase_txid = self.txid
        self.in_progress = True
        self.current = (self.txid, action)
        self.emit([self.txid, action], tup_id=self.txid, stream=CHECKPOINT_STREAM)

    def ack(self, tup_id: Any) -> None:
        self.in_progress = False
        txid, action = self.current
        if tup_id != txid:
            log.warning("checkpoint spout: ack for txid %r while at %d", tup_id, txid)
            return
        if action == PREPARE:
            # PREPARE was sent for the already-saved PREPARING txid: all bolts prepared
            self._save(txid, COMMITTING)
            return
        new_txid, new_phase = next_state(self.txid, self.phase, self.recovering)
        if self.recovering and action == INITSTATE:
            self.recovering = False
            log.log(logging.INFO if self.txid else logging.DEBUG, "checkpoint spout: recovered at txid %d", self.txid)
        if (new_txid, new_phase) != (self.txid, self.phase):
            self._save(new_txid, new_phase)
        self.last_checkpoint = time.monotonic() if action == COMMIT else self.last_checkpoint

    def fail(self, tup_id: Any) -> None:
        self.in_progress = False
        if not self.recovering:
            log.warning("checkpoint spout: %s of txid %s failed; recovering (rollback, initstate)",
                        self.current[1], tup_id)
            self.recovering = True
        self.last_checkpoint = time.monotonic()

    def _save(self, txid: int, phase: str) -> None:
        self.txid, self.phase = txid, phase
        if self.store is not None:
            self.store.set(self.path, {"txid": txid, "phase": phase})
