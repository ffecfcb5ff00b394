"""Nimbus's heartbeat cache: executor freshness judged by Nimbus's own clock.

Worker hosts' clocks differ from Nimbus's, so a heartbeat's ``time_secs`` is never compared
with local time. Instead the cache remembers, per executor, the last reported time and the
Nimbus time at which it last SAW that value change (Storm's ``update-executor-cache``). An
executor is timed out when its reported time has not changed for ``nimbus.task.timeout.secs``
of Nimbus time; an executor never seen is timed from the first time Nimbus looked for it.
Executors assigned less than ``nimbus.task.launch.secs`` ago are alive regardless (their
worker may still be starting).

Pure apart from the ``now`` values its callers pass; used by the monitor thread and by the
Thrift handler (getTopologyInfo), under Nimbus's lock.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from stormpy.thrift import storm
from stormpy.topology.plan import ExecutorRange

Slot = tuple[str, int]


@dataclass
class _Entry:
    reported_time: int | None
    nimbus_time: float


def executors_of_heartbeat(beat: storm.ClusterWorkerHeartbeat, slot_executors: Iterable[ExecutorRange]) -> list[ExecutorRange]:
    """Executors a worker heartbeat vouches for: those in its stats, or (no stats) its whole slot."""
    if beat.executor_stats:
        return [(e.task_start, e.task_end) for e in beat.executor_stats]
    return list(slot_executors)


class HeartbeatCache:
    """topology id -> executor -> (last reported time, Nimbus time it last changed)."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[ExecutorRange, _Entry]] = {}

    def update(self, topology_id: str, executor_slots: Mapping[ExecutorRange, Slot],
               heartbeats: Mapping[Slot, storm.ClusterWorkerHeartbeat], now: float) -> None:
        """Record the heartbeats Nimbus just read for the topology's assigned executors."""
        by_slot: dict[Slot, list[ExecutorRange]] = {}
        for executor, slot in executor_slots.items():
            by_slot.setdefault(slot, []).append(executor)
        reported: dict[ExecutorRange, int] = {}
        for slot, beat in heartbeats.items():
            for executor in executors_of_heartbeat(beat, by_slot.get(slot, ())):
                if executor_slots.get(executor) == slot:  # a stale worker on an old slot does not count
                    reported[executor] = int(beat.time_secs)
        cache = self._entries.setdefault(topology_id, {})
        for executor in executor_slots:
            entry = cache.get(executor)
            time_secs = reported.get(executor)
            if entry is None:
                cache[executor] = _Entry(time_secs, now)
            elif time_secs is not None and time_secs != entry.reported_time:
                entry.reported_time, entry.nimbus_time = time_secs, now
        for executor in list(cache):
            if executor not in executor_slots:
                del cache[executor]

    def is_timed_out(self, topology_id: str, executor: ExecutorRange, now: float, timeout_secs: float) -> bool:
        entry = self._entries.get(topology_id, {}).get(executor)
        return entry is not None and now - entry.nimbus_time >= timeout_secs

    def alive_executors(self, topology_id: str, assignment: storm.Assignment | None, now: float,
                        now_secs: int, timeout_secs: float, launch_secs: float) -> set[ExecutorRange]:
        """Executors of ``assignment`` that are within their launch grace or have fresh heartbeats.

        ``now`` is Nimbus's monotonic clock (for the cache), ``now_secs`` its wall clock in
        seconds (the assignment's start times are wall-clock seconds written by this Nimbus).
        """
        if assignment is None:
            return set()
        starts = assignment.executor_start_time_secs or {}
        alive = set()
        for info in assignment.executor_node_port or {}:
            executor = (info.task_start, info.task_end)
            start = starts.get(info)
            if start is not None and now_secs - start < launch_secs:
                alive.add(executor)
            elif not self.is_timed_out(topology_id, executor, now, timeout_secs):
                alive.add(executor)
        return alive

    def has_heartbeat(self, topology_id: str, executor: ExecutorRange) -> bool:
        entry = self._entries.get(topology_id, {}).get(executor)
        return entry is not None and entry.reported_time is not None

    def forget(self, topology_id: str) -> None:
        self._entries.pop(topology_id, None)

    def topologies(self) -> list[str]:
        return list(self._entries)
