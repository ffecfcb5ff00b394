"""Batches in flight to Spark: one writer thread per sink task, a bounded FIFO, results collected
by the owner's thread.

Why: a Spark write of a 50k-row batch takes a few hundred milliseconds, almost all of it in
the JVM (its own threads). Done on the executor thread, the executor waits that long and the
whole topology slows to the sink's pace (measured: 0.42x the same topology with a discarding
bolt). Done here, the executor keeps processing tuples while earlier batches are written.

The contract with the owner (a sink bolt or a Trident state), which keeps every ack, fail,
metric and error report on its own thread:

- ``submit(fn, payload)`` hands ``fn()`` to the writer thread; batches are written one after
  the other, in submission order (so ``handle_batch`` overrides never run concurrently and
  schema inference stays deterministic);
- ``pop_done()`` returns the finished batches, oldest first, stopping at the first one still
  running: completion is in submission order, so nothing is ever settled out of order;
- ``full`` tells the owner to wait (``wait_oldest``) before handing over another batch, which
  bounds memory: at most ``max_inflight`` batches are held besides the one being filled;
- ``on_done`` (optional) is called on the writer thread after each batch finished, e.g. the
  executor's ``call_soon`` so the owner settles at once instead of at its next timer tick.

An exception raised by ``fn`` is kept in the batch's ``error``; the thread never dies of it.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

log = logging.getLogger(__name__)

#: How often a long wait for room (or for the drain) logs that it is still waiting.
_WAIT_LOG_SECS = 30.0


class InFlight:
    """One batch handed to the writer: what the owner needs to settle it when it is done."""

    __slots__ = ("future", "payload", "submitted")

    def __init__(self, future: Future, payload: Any) -> None:
        self.future = future
        self.payload = payload
        self.submitted = time.monotonic()

    @property
    def done(self) -> bool:
        return self.future.done()

    @property
    def error(self) -> BaseException | None:
        """The exception ``fn`` raised, or None; only valid once ``done``."""
        return self.future.exception()

    @property
    def result(self) -> Any:
        """What ``fn`` returned; only valid once ``done`` and without ``error``."""
        return self.future.result()


class BackgroundWriter:
    """A single writer thread and a bounded FIFO of batches handed to it (see the module doc)."""

    def __init__(self, name: str, max_inflight: int, on_done: Callable[[], None] | None = None) -> None:
        if max_inflight < 1:
            raise ValueError(f"max_inflight must be at least 1, got {max_inflight}")
        self.name = name
        self.max_inflight = max_inflight
        self._on_done = on_done
        self._pool: ThreadPoolExecutor | None = None
        self._queue: deque[InFlight] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def full(self) -> bool:
        return len(self._queue) >= self.max_inflight

    def items(self) -> list[InFlight]:
        """Every batch not yet popped, oldest first (finished or not)."""
        return list(self._queue)

    def submit(self, fn: Callable[[], Any], payload: Any) -> InFlight:
        """Start ``fn`` on the writer thread; the caller checks ``full`` first (this never blocks)."""
        if self._pool is None:
            # Threads inherit the creating thread's CPU affinity: the writer shares the executor's
            # core, which costs nothing (the GIL) and keeps stormpy local's one-core-per-thread plan.
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"spark-writer-{self.name}")
        future = self._pool.submit(fn)
        item = InFlight(future, payload)
        self._queue.append(item)
        if self._on_done is not None:
            future.add_done_callback(self._notify)
        return item

    def _notify(self, _future: Future) -> None:
        try:
            self._on_done()  # type: ignore[misc]
        except Exception:  # noqa: BLE001 - the owner still settles at its next poll
            log.exception("writer %s: completion callback failed", self.name)

    def pop_done(self) -> list[InFlight]:
        """The finished batches at the head of the FIFO, removed from it, oldest first."""
        done: list[InFlight] = []
        queue = self._queue
        while queue and queue[0].future.done():
            done.append(queue.popleft())
        return done

    def wait_oldest(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the oldest batch to finish; True when it has."""
        if not self._queue:
            return True
        oldest = self._queue[0]
        try:
            oldest.future.exception(timeout=timeout)
        except FutureTimeout:
            return False
        return True

    def wait_for_room(self, settle: Callable[[list[InFlight]], None], stop: Callable[[], bool] | None = None) -> None:
        """Block until fewer than ``max_inflight`` batches are in flight, settling finished ones.

        The wait is as long as the oldest write takes (a Spark job has its own timeouts); a
        write that is still running after 30 s is logged every 30 s. ``stop()`` returning true
        ends the wait early (shutdown), leaving the FIFO full.
        """
        settle(self.pop_done())
        started = time.monotonic()
        next_log = started + _WAIT_LOG_SECS
        while self.full:
            if stop is not None and stop():
                return
            if not self.wait_oldest(1.0) and time.monotonic() >= next_log:
                next_log += _WAIT_LOG_SECS
                log.warning("writer %s: %d batches in flight, the oldest for %.0f s; waiting for Spark",
                            self.name, len(self._queue), time.monotonic() - self._queue[0].submitted)
            settle(self.pop_done())

    def drain(self, settle: Callable[[list[InFlight]], None], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every batch in flight, settling each; True if all did."""
        deadline = time.monotonic() + timeout
        settle(self.pop_done())
        while self._queue:
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("writer %s: %d batches still being written after %.0f s", self.name,
                            len(self._queue), timeout)
                return False
            self.wait_oldest(min(left, 1.0))
            settle(self.pop_done())
        return True

    def shutdown(self) -> None:
        """Stop the writer thread once its queued work is done (does not wait)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=False)
