"""Pure tests of the slot state machine with a fake World (no processes, no clock)."""
from __future__ import annotations

from dataclasses import dataclass, field

from stormpy.supervisor.slot import (Heartbeat, LocalAssignment, Limits, Phase, SlotState, adopted,
                                     step)

A = LocalAssignment.of("topo-1-1", [(1, 1), (2, 3)])
B = LocalAssignment.of("topo-1-1", [(4, 4)])


@dataclass
class FakeWorld:
    now: float = 1000.0
    desired: LocalAssignment | None = None
    limits: Limits = field(default_factory=lambda: Limits(worker_timeout_secs=10, start_timeout_secs=20,
                                                          shutdown_sleep_secs=3, restart_backoff_secs=1))
    ready: set[str] = field(default_factory=lambda: {"topo-1-1"})
    beats: dict[str, Heartbeat] = field(default_factory=dict)
    alive: set[int] = field(default_factory=set)
    launched: list[tuple[int, LocalAssignment]] = field(default_factory=list)
    kills: list[tuple[int, str, bool]] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    next_pid: int = 100

    def code_ready(self, topology_id: str) -> bool:
        return topology_id in self.ready

    def heartbeat(self, worker_id: str) -> Heartbeat | None:
        return self.beats.get(worker_id)

    def is_alive(self, pid: int, worker_id: str) -> bool:
        return pid in self.alive

    def launch(self, port: int, assignment: LocalAssignment) -> tuple[str, int]:
        self.next_pid += 1
        self.alive.add(self.next_pid)
        self.launched.append((port, assignment))
        return f"w{self.next_pid}", self.next_pid

    def kill(self, pid: int, worker_id: str, reason: str, force: bool) -> None:
        self.kills.append((pid, reason, force))

    def cleanup(self, worker_id: str) -> None:
        self.cleaned.append(worker_id)

    def beat(self, state: SlotState, assignment: LocalAssignment = A) -> None:
        self.beats[state.worker_id] = Heartbeat(self.now, assignment.topology_id, assignment.executors)


def test_empty_without_assignment_stays_empty():
    world = FakeWorld()
    assert step(SlotState(6700), world).phase is Phase.EMPTY
    assert world.launched == []


def test_waits_for_code_before_launch():
    world = FakeWorld(desired=A, ready=set())
    s = step(SlotState(6700), world)
    assert s.phase is Phase.EMPTY and world.launched == []
    world.ready.add("topo-1-1")
    s = step(s, world)
    assert s.phase is Phase.WAITING_FOR_LAUNCH and world.launched == [(6700, A)]


def test_launch_heartbeat_running():
    world = FakeWorld(desired=A)
    s = step(SlotState(6700), world)
    world.now += 1
    assert step(s, world).phase is Phase.WAITING_FOR_LAUNCH
    world.beat(s)
    s = step(s, world)
    assert s.phase is Phase.RUNNING and s.assignment == A


def test_not_started_in_time_is_killed_then_sigkilled():
    world = FakeWorld(desired=A)
    s = step(SlotState(6700), world)
    world.now += 21
    s = step(s, world)
    assert s.phase is Phase.KILLING and world.kills == [(s.pid, s.kill_reason, False)]
    assert "not started" in s.kill_reason
    world.now += 1
    s = step(s, world)
    assert len(world.kills) == 1                    # still inside the grace period
    world.now += 3
    s = step(s, world)
    assert world.kills[-1][2] is True and s.killed_hard
    s = step(s, world)
    assert len(world.kills) == 2                    # SIGKILL once
    world.alive.discard(s.pid)
    s = step(s, world)
    # gone -> the replacement is launched in the same step
    assert s.phase is Phase.WAITING_FOR_LAUNCH and len(world.launched) == 2
    assert world.cleaned


def test_heartbeat_timeout_kills():
    world = FakeWorld(desired=A)
    s = step(SlotState(6700), world)
    world.beat(s)
    s = step(s, world)
    world.now += 11
    s = step(s, world)
    assert s.phase is Phase.KILLING and "timed out" in s.kill_reason


def test_dead_worker_is_restarted_after_backoff():
    world = FakeWorld(desired=A)
    s = step(SlotState(6700), world)
    world.beat(s)
    s = step(s, world)
    world.alive.discard(s.pid)
    s = step(s, world)
    assert s.phase is Phase.EMPTY and s.restarts == 1 and world.kills == []
    s = step(s, world)
    assert s.phase is Phase.EMPTY                   # backoff
    world.now += 2
    s = step(s, world)
    assert s.phase is Phase.WAITING_FOR_LAUNCH and len(world.launched) == 2


def test_assignment_change_kills_and_relaunches():
    world = FakeWorld(desired=A)
    s = step(SlotState(6700), world)
    world.beat(s)
    s = step(s, world)
    world.desired = B
    s = step(s, world)
    assert s.phase is Phase.KILLING and "no longer assigned" in s.kill_reason
    world.alive.discard(s.pid)
    s = step(s, world)
    assert s.phase is Phase.WAITING_FOR_LAUNCH and s.assignment == B


def test_unassigned_port_is_freed():
    world = FakeWorld(desired=A)
    s = step(SlotState(6700), world)
    world.beat(s)
    s = step(s, world)
    world.desired = None
    s = step(s, world)
    assert s.phase is Phase.KILLING
    world.alive.discard(s.pid)
    s = step(s, world)
    assert s.phase is Phase.EMPTY and s.worker_id is None


def test_adopted_worker_keeps_running_with_fresh_heartbeat():
    world = FakeWorld(desired=A)
    world.alive.add(42)
    world.beats["wx"] = Heartbeat(world.now, A.topology_id, A.executors, 42)
    s = adopted(6700, "wx", 42, A, world.now)
    s = step(s, world)
    assert s.phase is Phase.RUNNING and world.launched == [] and world.kills == []


def test_adopted_dead_worker_is_replaced():
    world = FakeWorld(desired=A)
    s = step(adopted(6700, "wx", 42, A, world.now), world)
    assert s.phase is Phase.EMPTY and world.cleaned == ["wx"]


def test_crash_loop_backs_off_exponentially_and_resets_when_running():
    world = FakeWorld(desired=A)
    s = step(SlotState(6700), world)
    for expected_wait in (1, 2, 4):
        world.alive.discard(s.pid)
        s = step(s, world)                          # died before its first heartbeat
        assert s.phase is Phase.EMPTY
        world.now += expected_wait - 0.5
        assert step(s, world).phase is Phase.EMPTY  # still backing off
        world.now += 0.5
        s = step(s, world)
        assert s.phase is Phase.WAITING_FOR_LAUNCH
    world.beat(s)
    s = step(s, world)
    assert s.phase is Phase.RUNNING and s.restarts == 0


def test_adopted_worker_without_heartbeat_waits_for_launch() -> None:
    from stormpy.supervisor.slot import LocalAssignment, Phase, adopted

    assignment = LocalAssignment.of("t-1-1", [(1, 2)])
    assert adopted(6700, "w", 42, assignment, 10.0).phase is Phase.RUNNING
    launching = adopted(6700, "w", 42, assignment, 10.0, launching=True)
    assert launching.phase is Phase.WAITING_FOR_LAUNCH and launching.since == 10.0
