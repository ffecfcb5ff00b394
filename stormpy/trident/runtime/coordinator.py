"""The master batch coordinator: which txids run, in which attempt, and when they commit.

:class:`CoordinatorMachine` is pure (Storm's ``MasterBatchCoordinator`` without I/O): it is
told about acks, fails and the clock, and returns the effects to perform (emits on
``$batch`` / ``$commit`` / ``$success`` and what to save in TransactionalState). Rules:

- txids start at 1; ``current`` is the txid that commits next (saved as ``coordinator/currtx``).
- up to ``max_pending`` txids are active, ``current .. current + max_pending - 1``; a new
  batch starts at most once per ``emit_interval_secs``; each (re)start of a txid is a new
  attempt, numbered above every attempt used before (saved as ``coordinator/currattempts``,
  so a restarted coordinator never reuses one and tasks can drop stale tuples).
- processing ack: PROCESSING -> PROCESSED; the ``current`` txid, once PROCESSED, becomes
  COMMITTING and ``$commit`` is emitted (strict txid order: only ``current`` ever commits).
- commit ack: ``$success`` is emitted, ``current`` advances and is saved. The attempt ids are
  not written again then (one ZooKeeper write less in every commit's round trip): the stored
  ones still name the committed txid, which nothing reads (only txids from ``current`` on
  run), and the next batch start writes them without it.
- ``coordinator/currtx`` is written with a compare-and-set on its ZooKeeper version: a second
  coordinator of the same topology (a stale one whose worker was cut off, still running) that
  writes after the other one fails with :class:`StaleCoordinatorError` instead of moving the
  position back; its task is re-created and resumes from what is stored.
- fail (processing or commit) of the txid's live attempt: that txid and every later active
  txid are dropped (Storm's ``_activeTx.tailMap(txid).clear()``) and restart as new attempts.

:class:`MasterBatchCoordinator` is the ``$mastercoord-bg0`` spout around it.
"""
from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stormpy import config as cfg
from stormpy import streams
from stormpy.api.component import Spout
from stormpy.api.dsl import Stream
from stormpy.trident.runtime.stats import REPUBLISH_SECS, LatencyWindow
from stormpy.trident.state import txstate

log = logging.getLogger(__name__)

# The system names are owned by stormpy.streams; the names used across Trident are kept here.
BATCH_STREAM = streams.BATCH_STREAM
COMMIT_STREAM = streams.COMMIT_STREAM
SUCCESS_STREAM = streams.SUCCESS_STREAM
COORDINATOR_ID = streams.MASTER_COORDINATOR
TX_FIELD = "tx"
#: streams "$coord-<stream>" carry, per batch, how many tuples of <stream> each task sent (direct)
COORD_PREFIX = streams.COORD_STREAM_PREFIX
coord_stream = streams.coord_stream


class StaleCoordinatorError(RuntimeError):
    """Another coordinator of the same topology wrote ``coordinator/currtx`` since this one read it."""


class Status(enum.Enum):
    PROCESSING = "processing"
    PROCESSED = "processed"
    COMMITTING = "committing"


@dataclass(frozen=True)
class Emit:
    """Emit ``[txid, attempt]`` on ``stream``; ``tracked`` emits are acker-tracked trees."""
    stream: str
    txid: int
    attempt: int
    tracked: bool = True


@dataclass(frozen=True)
class Save:
    """Persist the coordinator's position (current txid and the attempt ids in use; ``attempts``
    None: the stored ones stay, the change concerns only txids below ``current_txid``)."""
    current_txid: int
    attempts: dict[int, int] | None


@dataclass
class TxStatus:
    status: Status
    attempt: int


class CoordinatorMachine:
    """Pure MBC state machine; every method returns a list of Emit / Save effects."""

    def __init__(self, current_txid: int = 1, attempts: Mapping[int, int] | None = None,
                 max_pending: int = 1, emit_interval_secs: float = 0.5) -> None:
        self.current = max(1, int(current_txid))
        # Attempts of committed txids (below current) may still be stored: they are never used.
        self.attempts: dict[int, int] = {int(k): int(v) for k, v in (attempts or {}).items()
                                         if int(k) >= self.current}
        self.max_pending = max(1, int(max_pending))
        self.emit_interval_secs = max(0.0, float(emit_interval_secs))
        self.active: dict[int, TxStatus] = {}
        self.last_emit = -math.inf
        self.running = True

    # ------------------------------------------------------------ inputs
    def step(self, now: float) -> list[Any]:
        """Storm's ``sync()``: commit the current txid if ready, start batches if allowed."""
        effects: list[Any] = []
        status = self.active.get(self.current)
        if status is not None and status.status is Status.PROCESSED:
            status.status = Status.COMMITTING
            effects.append(Emit(COMMIT_STREAM, self.current, status.attempt))
        if not self.running:
            return effects
        for txid in range(self.current, self.current + self.max_pending):
            if txid in self.active:
                continue
            if now - self.last_emit < self.emit_interval_secs:
                break
            attempt = self.attempts.get(txid, -1) + 1
            self.attempts[txid] = attempt
            self.active[txid] = TxStatus(Status.PROCESSING, attempt)
            self.last_emit = now
            effects.append(Save(self.current, dict(self.attempts)))
            effects.append(Emit(BATCH_STREAM, txid, attempt))
        return _one_save(effects)

    def on_ack(self, stream: str, txid: int, attempt: int, now: float) -> list[Any]:
        status = self.active.get(txid)
        effects: list[Any] = []
        if status is None or status.attempt != attempt:
            return self.step(now)  # an attempt we already gave up on
        if stream == BATCH_STREAM and status.status is Status.PROCESSING:
            status.status = Status.PROCESSED
        elif stream == COMMIT_STREAM and status.status is Status.COMMITTING:
            del self.active[txid]
            self.attempts.pop(txid, None)
            self.current = txid + 1
            effects.append(Save(self.current, None))
            effects.append(Emit(SUCCESS_STREAM, txid, attempt, tracked=False))
        return _one_save(effects + self.step(now))

    def on_fail(self, stream: str, txid: int, attempt: int, now: float) -> list[Any]:
        status = self.active.get(txid)
        if status is None or status.attempt != attempt:
            return self.step(now)
        for later in [t for t in self.active if t >= txid]:
            del self.active[later]
        log.info("trident coordinator: txid %d attempt %d failed (%s); replaying it and %s",
                 txid, attempt, stream, "later txids" if self.max_pending > 1 else "nothing else")
        return self.step(now)

    def set_running(self, running: bool) -> None:
        """Deactivated: no new batches; in-flight ones still commit."""
        self.running = running

    def in_flight(self) -> int:
        return len(self.active)


def _one_save(effects: list[Any]) -> list[Any]:
    """The Saves of one step merged into one, where the first was: the newest position and
    attempts, written before every emit of the step (a commit's position and the attempts of
    the batch started after it in one round of ZooKeeper writes instead of two). Saving earlier
    is always safe: an emit only needs its Save to come before it."""
    saves = [i for i, effect in enumerate(effects) if isinstance(effect, Save)]
    if len(saves) < 2:
        return effects
    attempts = next((effects[i].attempts for i in reversed(saves) if effects[i].attempts is not None), None)
    merged = Save(effects[saves[-1]].current_txid, attempts)
    out = [effect for effect in effects if not isinstance(effect, Save)]
    out.insert(saves[0], merged)
    return out


class MasterBatchCoordinator(Spout):
    """``$mastercoord-bg0``: drives a CoordinatorMachine from the spout callbacks.

    Runs on its spout executor's thread. Tuple ids are ``(stream, txid, attempt)``; the acker
    tells us when the batch tree or the commit tree of an attempt completed or failed.
    """

    outputs = [Stream([TX_FIELD], BATCH_STREAM), Stream([TX_FIELD], COMMIT_STREAM),
               Stream([TX_FIELD], SUCCESS_STREAM)]
    timer_interval_secs = REPUBLISH_SECS   # on_timer: latencies the publish throttle held back

    def __init__(self) -> None:
        self.machine: CoordinatorMachine | None = None
        self.txstate: Any = None
        self._versioned = False
        self._current_version: int | None = None
        self.committed_batches = 0
        #: ``$batch`` emit -> ack (the whole batch processed) and ``$commit`` emit -> ack, per attempt.
        self.batch_latency = LatencyWindow()
        self.commit_latency = LatencyWindow()

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        self.txstate = txstate.transactional_state(context, dict(stormconf))
        self._versioned = hasattr(self.txstate, "set_versioned")
        if self._versioned:
            current, self._current_version = self.txstate.get_versioned(txstate.COORDINATOR_CURRENT_TX)
            current = 1 if current is None else current
        else:
            current = self.txstate.get(txstate.COORDINATOR_CURRENT_TX, 1)
        attempts = self.txstate.get(txstate.COORDINATOR_ATTEMPTS, {}) or {}
        max_pending = stormconf.get(cfg.TOPOLOGY_MAX_SPOUT_PENDING.name) or 1
        interval_ms = cfg.read(stormconf, cfg.TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS)
        self.machine = CoordinatorMachine(current, attempts, int(max_pending), float(interval_ms) / 1000.0)
        self.machine.set_running(False)  # activate() starts it
        # A fresh topology (txid 1, nothing stored) is not news; resuming a stored txid is.
        log.log(logging.INFO if current != 1 or attempts else logging.DEBUG,
                "trident coordinator %s: resuming at txid %d (max pending %d)",
                context.component_id, self.machine.current, self.machine.max_pending)

    def activate(self) -> None:
        self.machine.set_running(True)

    def deactivate(self) -> None:
        self.machine.set_running(False)

    def on_timer(self) -> None:
        self.batch_latency.publish(self.metrics, "trident.batch.latency")
        self.commit_latency.publish(self.metrics, "trident.commit.latency")

    def next_tuple(self) -> None:
        self._apply(self.machine.step(time.monotonic()))

    @property
    def commit_latencies_ms(self) -> list[float]:
        """Recent commit latencies (benchmarks read them in local mode)."""
        return list(self.commit_latency.samples)

    def ack(self, tup_id: Any) -> None:
        stream, txid, attempt = tup_id
        now = time.monotonic()
        window = self.commit_latency if stream == COMMIT_STREAM else self.batch_latency
        if window.stop(txid, attempt, now) is not None:
            window.publish(self.metrics, "trident.commit.latency" if stream == COMMIT_STREAM
                           else "trident.batch.latency")
        self._apply(self.machine.on_ack(stream, txid, attempt, now))

    def fail(self, tup_id: Any) -> None:
        stream, txid, attempt = tup_id
        (self.commit_latency if stream == COMMIT_STREAM else self.batch_latency).forget(txid, attempt)
        self.metrics.incr("trident.batches.failed")
        self._apply(self.machine.on_fail(stream, txid, attempt, time.monotonic()))

    def _save(self, save: Save) -> None:
        """Write ``currtx`` only if nobody else wrote it since this coordinator read or wrote it,
        and the attempts (if any) with it, in one ZooKeeper transaction: one round trip on the
        path from a commit's ack to the next ``$commit``, and a stale coordinator writes neither."""
        attempts = None if save.attempts is None else {str(k): v for k, v in save.attempts.items()}
        if not self._versioned:
            self.txstate.set(txstate.COORDINATOR_CURRENT_TX, save.current_txid)
            if attempts is not None:
                self.txstate.set(txstate.COORDINATOR_ATTEMPTS, attempts)
            return
        from stormpy.cluster_state.transactional import StaleVersionError
        also = None if attempts is None else {txstate.COORDINATOR_ATTEMPTS: attempts}
        try:
            self._current_version = self.txstate.set_versioned(txstate.COORDINATOR_CURRENT_TX, save.current_txid,
                                                               self._current_version, also=also)
        except StaleVersionError as exc:
            self.machine.set_running(False)
            raise StaleCoordinatorError(
                f"trident coordinator: another coordinator of this topology wrote {txstate.COORDINATOR_CURRENT_TX} "
                f"({exc}); this one is stale (its worker was cut off or replaced) and stops before it "
                "moves the position back") from None

    def _apply(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, Save):
                # Before the emit that depends on it: a restarted coordinator must never
                # reuse an attempt id that tuples in flight may still carry.
                self._save(effect)
                continue
            values = [[effect.txid, effect.attempt]]
            if effect.tracked:
                window = self.commit_latency if effect.stream == COMMIT_STREAM else self.batch_latency
                window.start(effect.txid, effect.attempt, time.monotonic())
                self.emit(values, tup_id=(effect.stream, effect.txid, effect.attempt), stream=effect.stream)
            else:
                self.emit(values, stream=effect.stream)
            if effect.stream == SUCCESS_STREAM:
                self.committed_batches += 1
                self.metrics.set("trident.txid", effect.txid)
                self.metrics.set("trident.batches.committed", self.committed_batches)
