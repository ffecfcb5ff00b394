"""Nimbus's clocks: one timer thread for delayed events and periodic work.

``EventTimer`` runs callables at due times on a single thread ("nimbus-timer"): the delayed
``remove`` of a killed topology, the ``do-rebalance`` of a rebalancing one, and the periodic
tasks (monitor every ``nimbus.monitor.freq.secs``, inbox cleanup every
``nimbus.cleanup.inbox.freq.secs``). Delayed events live only in memory; that is safe
because Nimbus's ``startup`` transition schedules them again from ZooKeeper after a restart.

A SUSPENDED ZooKeeper connection (or lost leadership) skips the periodic work: a leader that
cannot see the cluster must not reassign it.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from stormpy import config as cfg
from stormpy.nimbus.core import Nimbus

log = logging.getLogger(__name__)


class EventTimer:
    """Runs callables after a delay, in due order, on one thread; errors are logged, not fatal."""

    def __init__(self, name: str = "nimbus-timer", clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._queue: list[tuple[float, int, str, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "EventTimer":
        self._thread.start()
        return self

    def schedule(self, delay_secs: float, func: Callable[[], None], what: str = "") -> None:
        """Run ``func`` after ``delay_secs`` (0 = as soon as possible, after what is already due)."""
        with self._cond:
            heapq.heappush(self._queue, (self._clock() + max(0.0, delay_secs), next(self._seq), what, func))
            self._cond.notify()
        if what:
            log.debug("scheduled %s in %gs", what, delay_secs)

    def schedule_recurring(self, period_secs: float, func: Callable[[], None], what: str,
                           first_delay_secs: float | None = None) -> None:
        """Run ``func`` every ``period_secs`` (measured from the end of the previous run)."""
        def run_and_reschedule() -> None:
            try:
                func()
            finally:
                if not self._stopped:
                    self.schedule(period_secs, run_and_reschedule)
        self.schedule(period_secs if first_delay_secs is None else first_delay_secs, run_and_reschedule, what)

    def pending(self) -> list[str]:
        with self._cond:
            return [what for _due, _seq, what, _f in sorted(self._queue) if what]

    def stop(self, reason: str = "shutdown") -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        log.info("event timer stopped: %s", reason)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._queue or self._queue[0][0] > self._clock()):
                    timeout = self._queue[0][0] - self._clock() if self._queue else None
                    self._cond.wait(timeout)
                if self._stopped:
                    return
                _due, _seq, what, func = heapq.heappop(self._queue)
            try:
                func()
            except Exception:
                log.exception("timer task %s failed", what or func)


class NimbusMonitor:
    """Registers Nimbus's periodic work on an EventTimer and guards it against lost connections."""

    def __init__(self, nimbus: Nimbus, timer: EventTimer, leader_id: str) -> None:
        self.nimbus = nimbus
        self.timer = timer
        self.leader_id = leader_id
        self.rounds = 0

    def start(self) -> None:
        conf = self.nimbus.conf
        self.timer.schedule_recurring(conf[cfg.NIMBUS_MONITOR_FREQ_SECS], self.monitor_round, "monitor", 0)
        self.timer.schedule_recurring(conf[cfg.NIMBUS_CLEANUP_INBOX_FREQ_SECS], self.cleanup_round,
                                      "inbox cleanup", 0)

    def can_write(self) -> bool:
        state = self.nimbus.state
        if not state.is_connected():
            log.warning("skipping Nimbus housekeeping: ZooKeeper connection is suspended")
            return False
        if not state.is_leader() or not self.nimbus.leader_ready:
            # Re-taking the lock is the HA thread's job (it checks the code first, Storm's rule).
            log.warning("skipping Nimbus housekeeping: this Nimbus is not the leader")
            return False
        return True

    def monitor_round(self) -> None:
        """One monitor round, timed: its duration is the cost of scheduling the whole cluster.

        Logged at DEBUG every round (``benchmarks/nimbus_scale.py`` reads these lines) and as a
        warning when a round outlasts ``nimbus.monitor.freq.secs``: Nimbus then falls behind.
        """
        if not self.can_write():
            return
        started = time.perf_counter()
        heartbeat_before = self.nimbus.heartbeat_secs
        self.nimbus.monitor()
        self.rounds += 1
        took = time.perf_counter() - started
        heartbeat = self.nimbus.heartbeat_secs - heartbeat_before
        freq = self.nimbus.conf[cfg.NIMBUS_MONITOR_FREQ_SECS]
        level = logging.WARNING if took > freq else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, "monitor round %d took %.1f ms (heartbeat reads %.1f ms)%s", self.rounds, took * 1000,
                    heartbeat * 1000, f", longer than nimbus.monitor.freq.secs ({freq} s)" if took > freq else "")

    def cleanup_round(self) -> None:
        self.nimbus.files.expire_streams()
        self.nimbus.files.cleanup_inbox(self.nimbus.conf[cfg.NIMBUS_INBOX_JAR_EXPIRATION_SECS])
