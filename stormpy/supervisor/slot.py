"""One supervisor port ("slot") as a pure state machine (DESIGN section 5, STYLE section 3).

The supervisor's process loop gathers what it knows about a port into a :class:`World` and calls
``step(state, world) -> SlotState``. ``World`` is the only door to processes and the clock, so
tests pass a fake one. The phases follow Storm's ``Slot.java``:

    EMPTY --launch--> WAITING_FOR_LAUNCH --first heartbeat--> RUNNING
      ^                     |   (start timeout / assignment changed)  | (heartbeat timed out /
      |                     v                                          v  assignment changed)
      +---------------- KILLING (SIGTERM, SIGKILL after the grace period) <-- ...
    a worker that dies on its own goes back to EMPTY and is relaunched on the next step.

``TRANSITIONS`` is the one table; each handler returns the next state and does its I/O only
through ``world``. The loop logs ``"slot %d: %s -> %s"`` when the phase changes.
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from stormpy.topology.plan import ExecutorRange

log = logging.getLogger(__name__)



class Phase(enum.Enum):
    """Where a port's worker is in its life (Storm's ``Slot.MachineState``).

    EMPTY: no worker process (``pid`` and ``worker_id`` are None); WAITING_FOR_LAUNCH: launched,
    no heartbeat of this assignment yet; RUNNING: heartbeating the assignment; KILLING: told to
    stop, waiting for the process to go (SIGKILL after the grace period). Every phase but EMPTY
    has a process: ``pid``, ``worker_id`` and ``assignment`` are set. The values are what the
    supervisor's log lines show (``SlotState.describe``).
    """

    EMPTY = "empty"
    WAITING_FOR_LAUNCH = "waiting-for-launch"
    RUNNING = "running"
    KILLING = "killing"


@dataclass(frozen=True)
class LocalAssignment:
    """What should run on a port: a topology and its executors (order does not matter)."""

    topology_id: str
    executors: frozenset[ExecutorRange]

    @classmethod
    def of(cls, topology_id: str, executors: object) -> "LocalAssignment":
        return cls(topology_id, frozenset((int(s), int(e)) for s, e in executors))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Heartbeat:
    """A worker's local heartbeat as the supervisor reads it from disk."""

    time_secs: float
    topology_id: str
    executors: frozenset[ExecutorRange]
    pid: int | None = None


@dataclass(frozen=True)
class Limits:
    """The timeouts a slot obeys, from the supervisor's config."""

    worker_timeout_secs: float = 30
    start_timeout_secs: float = 120
    shutdown_sleep_secs: float = 3
    restart_backoff_secs: float = 1


@dataclass(frozen=True)
class SlotState:
    """Everything the supervisor knows about one port between two steps; a step returns a new one.

    Frozen, so a step cannot half-change a state: ``step(state, world)`` is pure apart from the
    calls on ``world``. Invariants: in EMPTY no process is known (``pid``/``worker_id`` None);
    in every other phase ``pid``, ``worker_id`` and ``assignment`` describe the one process
    on this port; ``since`` is when the phase was entered (the timeouts count from it);
    ``restarts`` counts deaths in a row (it drives :func:`restart_backoff` and is reset to 0
    when a worker reaches RUNNING).
    """

    port: int
    phase: Phase = Phase.EMPTY
    assignment: LocalAssignment | None = None      # what runs (or is being started) here
    worker_id: str | None = None
    pid: int | None = None
    since: float = 0.0                             # when the phase was entered (world clock)
    killed_hard: bool = False                      # SIGKILL already sent while KILLING
    kill_reason: str = ""
    restarts: int = 0

    def describe(self) -> str:
        topo = self.assignment.topology_id if self.assignment else "-"
        return f"{self.phase.value}[{topo} worker={self.worker_id} pid={self.pid}]"


class World(Protocol):
    """Inputs to one step and the only way a step acts on processes."""

    now: float
    desired: LocalAssignment | None         # what sync says this port should run
    limits: Limits

    def code_ready(self, topology_id: str) -> bool: ...

    def heartbeat(self, worker_id: str) -> Heartbeat | None: ...

    def is_alive(self, pid: int, worker_id: str) -> bool: ...

    def launch(self, port: int, assignment: LocalAssignment) -> tuple[str, int]: ...

    def kill(self, pid: int, worker_id: str, reason: str, force: bool) -> None: ...

    def cleanup(self, worker_id: str) -> None: ...


Transition = Callable[[SlotState, World], SlotState]


def restart_backoff(restarts: int, limits: Limits) -> float:
    """Pause before relaunching after ``restarts`` deaths in a row: doubles, at most 32x.

    A worker whose user code fails at import dies again at once; this keeps such a port from
    forking many processes a second. The count resets when a worker reaches RUNNING.
    """
    return limits.restart_backoff_secs * 2 ** min(max(restarts - 1, 0), 5)


def _start_kill(state: SlotState, world: World, reason: str) -> SlotState:
    assert state.pid is not None and state.worker_id is not None
    world.kill(state.pid, state.worker_id, reason, False)
    return replace(state, phase=Phase.KILLING, since=world.now, killed_hard=False, kill_reason=reason)


def _gone(state: SlotState, world: World, why: str) -> SlotState:
    """The worker process no longer exists: forget it and free the port."""
    if state.worker_id is not None:
        world.cleanup(state.worker_id)
    log.info("slot %d: worker %s %s", state.port, state.worker_id, why)
    return SlotState(port=state.port, phase=Phase.EMPTY, since=world.now, restarts=state.restarts)


def _fresh(hb: Heartbeat | None, state: SlotState, world: World) -> bool:
    return (hb is not None and world.now - hb.time_secs <= world.limits.worker_timeout_secs
            and state.assignment is not None and hb.topology_id == state.assignment.topology_id)


def on_empty(state: SlotState, world: World) -> SlotState:
    desired = world.desired
    if desired is None or not world.code_ready(desired.topology_id):
        return state
    if state.restarts and world.now - state.since < restart_backoff(state.restarts, world.limits):
        return state     # a worker just died here: do not fork in a tight loop
    worker_id, pid = world.launch(state.port, desired)
    return replace(state, phase=Phase.WAITING_FOR_LAUNCH, assignment=desired, worker_id=worker_id,
                   pid=pid, since=world.now, killed_hard=False, kill_reason="")


def on_waiting(state: SlotState, world: World) -> SlotState:
    assert state.pid is not None and state.worker_id is not None
    if world.desired != state.assignment:
        return _start_kill(state, world, "assignment changed before the worker started")
    if not world.is_alive(state.pid, state.worker_id):
        return replace(_gone(state, world, "died before its first heartbeat"), restarts=state.restarts + 1)
    hb = world.heartbeat(state.worker_id)
    if hb is not None and hb.time_secs >= state.since - 1 and _fresh(hb, state, world):
        return replace(state, phase=Phase.RUNNING, since=world.now, restarts=0)
    if world.now - state.since > world.limits.start_timeout_secs:
        return _start_kill(state, world, "not started within supervisor.worker.start.timeout.secs")
    return state


def on_running(state: SlotState, world: World) -> SlotState:
    assert state.pid is not None and state.worker_id is not None
    if world.desired != state.assignment:
        return _start_kill(state, world, "no longer assigned to this port")
    if not world.is_alive(state.pid, state.worker_id):
        return replace(_gone(state, world, "died; restarting it"), restarts=state.restarts + 1)
    if not _fresh(world.heartbeat(state.worker_id), state, world):
        return _start_kill(state, world, "heartbeat timed out (supervisor.worker.timeout.secs)")
    return state


def on_killing(state: SlotState, world: World) -> SlotState:
    assert state.pid is not None and state.worker_id is not None
    if not world.is_alive(state.pid, state.worker_id):
        return _gone(state, world, f"stopped ({state.kill_reason})")
    if world.now - state.since >= world.limits.shutdown_sleep_secs and not state.killed_hard:
        world.kill(state.pid, state.worker_id, f"{state.kill_reason}; still alive after "
                   f"{world.limits.shutdown_sleep_secs}s", True)
        return replace(state, killed_hard=True)
    return state


TRANSITIONS: dict[Phase, Transition] = {
    Phase.EMPTY: on_empty,
    Phase.WAITING_FOR_LAUNCH: on_waiting,
    Phase.RUNNING: on_running,
    Phase.KILLING: on_killing,
}


def step(state: SlotState, world: World) -> SlotState:
    """Advance one port by one step; may call ``world.launch``/``kill``/``cleanup``."""
    new = TRANSITIONS[state.phase](state, world)
    if new.phase is not state.phase:
        log.info("slot %d: %s -> %s", state.port, state.describe(), new.describe())
        if new.phase is Phase.EMPTY and world.desired is not None:
            # Go on at once (launch the replacement / the newly assigned worker).
            return TRANSITIONS[Phase.EMPTY](new, world) if new.restarts == state.restarts else new
    return new


def adopted(port: int, worker_id: str, pid: int, assignment: LocalAssignment, now: float,
            launching: bool = False) -> SlotState:
    """The state for a worker found running when the supervisor (re)starts: RUNNING, so the next
    step judges it by its heartbeat and process like any other worker. A worker that has not
    written its first heartbeat yet (the previous supervisor died right after launching it) is
    adopted as WAITING_FOR_LAUNCH, so the start timeout, not the heartbeat timeout, judges it."""
    phase = Phase.WAITING_FOR_LAUNCH if launching else Phase.RUNNING
    return SlotState(port=port, phase=phase, assignment=assignment, worker_id=worker_id, pid=pid, since=now)
