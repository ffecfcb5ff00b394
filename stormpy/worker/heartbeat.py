"""A worker's periodic reports: local heartbeat, cluster heartbeat with stats, errors.

- :class:`Heart` is one small thread per periodic concern (celery's ``Heart``): an interval, a
  callable, ``start()``/``stop()``. A failing beat is logged and retried on the next tick; with a
  :class:`~stormpy.daemon_guard.ThreadGuard` the first failure of a streak is also reported as
  an error, and the thread itself runs under the guard.
- :func:`local_heartbeat` builds the ``LSWorkerHeartbeat`` the supervisor reads from
  ``<storm.local.dir>/workers/<worker-id>/heartbeats`` to decide whether the worker is alive.
- :func:`cluster_heartbeat` builds the ``ClusterWorkerHeartbeat`` with executor stats; it goes
  through a ``HeartbeatSink`` (ZooKeeper ``/workerbeats`` today), which Nimbus reads to decide
  whether executors must move.
- :class:`ErrorReporter` is the runtime's ``reporter``: executor threads call
  ``report_error``, a background thread writes ``/errors/...``. It keeps a bounded queue and a
  per-component rate limit, so a bolt that raises on every tuple cannot flood ZooKeeper or
  stall its executor on ZooKeeper round trips. A report's ``then`` runs after its write (or
  when it is dropped): the spouts settle a skipped record only then (see the component contract).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from stormpy.daemon_guard import ThreadGuard
from stormpy.thrift import storm
from stormpy.topology.plan import ExecutorRange

log = logging.getLogger(__name__)



class Heart:
    """Calls ``beat()`` every ``interval_secs`` on its own thread until ``stop()``."""

    def __init__(self, name: str, interval_secs: float, beat: Callable[[], None],
                 guard: ThreadGuard | None = None) -> None:
        self.name = name
        self.interval_secs = max(0.05, float(interval_secs))
        self._beat = beat
        self._guard = guard
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0

    def start(self) -> "Heart":
        if self._guard is not None:
            self._thread = self._guard.start_thread(self.name, self._run)
        else:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_secs):
            self.beat_now()

    def beat_now(self) -> None:
        """One beat on the caller's thread; failures are logged (first ones and then sparsely)."""
        try:
            self._beat()
            if self._failures:
                log.info("%s: beating again after %d failure(s)", self.name, self._failures)
            self._failures = 0
        except Exception as exc:  # noqa: BLE001 - the next tick retries
            self._failures += 1
            if self._failures == 1 and self._guard is not None:
                self._guard.failed(self.name, exc, handled="retried on the next beat", count=False)
            elif self._failures <= 3 or self._failures % 30 == 0:
                log.warning("%s: beat failed (%d in a row): %s", self.name, self._failures, exc)

    def stop(self, timeout_secs: float = 5.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and threading.current_thread() is not thread:
            thread.join(timeout_secs)


def executor_infos(executors: Iterable[ExecutorRange]) -> list[Any]:
    return [storm.ExecutorInfo(task_start=s, task_end=e) for s, e in sorted(executors)]


def local_heartbeat(topology_id: str, executors: Iterable[ExecutorRange], port: int) -> Any:
    """The heartbeat the supervisor reads; the time is this host's wall clock, as the supervisor's."""
    return storm.LSWorkerHeartbeat(time_secs=int(time.time()), topology_id=topology_id,
                                   executors=executor_infos(executors), port=port, pid=os.getpid())


def cluster_heartbeat(topology_id: str, stats: Mapping[Any, Any], started_at: float) -> Any:
    """``ClusterWorkerHeartbeat`` with one ``storm.ExecutorStats`` per executor.

    ``stats`` is keyed by ``storm.ExecutorInfo`` (``WorkerRuntime.thrift_stats()``) or by
    ``(task_start, task_end)``.
    """
    now = time.time()
    executor_stats = {key if isinstance(key, storm.ExecutorInfo) else
                      storm.ExecutorInfo(task_start=key[0], task_end=key[1]): value
                      for key, value in stats.items()}
    return storm.ClusterWorkerHeartbeat(storm_id=topology_id, executor_stats=executor_stats,
                                        time_secs=int(now), uptime_secs=int(now - started_at))


class ErrorReporter:
    """The runtime's ``reporter``: queue errors, write them to ZooKeeper from one thread."""

    def __init__(self, write: Callable[[str, Any], None], host: str, port: int,
                 max_queued: int = 100, per_component_per_min: int = 30,
                 guard: ThreadGuard | None = None) -> None:
        self._write = write            # (component_id, storm.ErrorInfo) -> None
        self.host = host
        self.port = port
        self._queue: queue.SimpleQueue[tuple[str, Any, Callable[[], object] | None] | None] = queue.SimpleQueue()
        self._max_queued = max_queued
        self._limit = per_component_per_min
        self._window: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()
        self.dropped = 0
        self.stats_sink = None
        self._guard = guard
        self._thread: threading.Thread | None = None

    def start(self) -> "ErrorReporter":
        if self._guard is not None:
            self._thread = self._guard.start_thread("error-reporter", self._run)
        else:
            self._thread = threading.Thread(target=self._run, name="error-reporter", daemon=True)
            self._thread.start()
        return self

    def report_error(self, component_id: str, task_id: int, text: str,
                     then: Callable[[], object] | None = None) -> None:
        """Called by executor threads; never blocks on ZooKeeper. ``then`` runs on the writer
        thread after the write, or here at once if the report is dropped."""
        log.error("component %s task %s: %s", component_id, task_id, text)
        now = time.monotonic()
        with self._lock:
            start, count = self._window.get(component_id, (now, 0))
            if now - start > 60:
                start, count = now, 0
            dropped = count >= self._limit or self._queue.qsize() >= self._max_queued
            if dropped:
                self.dropped += 1
            else:
                self._window[component_id] = (start, count + 1)
        if dropped:
            if then is not None:
                then()
            return
        info = storm.ErrorInfo(error=str(text)[:8192], error_time_secs=int(time.time()), host=self.host,
                               port=self.port)
        self._queue.put((component_id, info, then))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            component_id, info, then = item
            try:
                self._write(component_id, info)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the error stays in the log
                log.warning("could not write error of %s to ZooKeeper: %s", component_id, exc)
            if then is not None:
                try:
                    then()
                except Exception:  # noqa: BLE001 - a caller's callback must not end the writer
                    log.exception("after writing an error of %s", component_id)

    def stop(self, timeout_secs: float = 5.0) -> None:
        """Write what is queued (bounded by ``timeout_secs``) and end the thread."""
        self._queue.put(None)
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout_secs)
