"""The topology status state machine: ONE table of (status, event) -> transition, pure functions.

Storm's ``state-transitions`` (nimbus.clj) / ``TOPO_STATE_TRANSITIONS`` (Nimbus.java) as data:
each transition takes the current ``StormBase`` and the event's argument and returns an
``Outcome`` — the new StormBase (or None to leave it) and the effects Nimbus must perform
(write the base, schedule a delayed event, reassign executors, remove the topology). Nothing
here does I/O or reads the clock, so every row is a plain unit test.

A (status, event) pair missing from the table is an error for events a person sends
(activate, deactivate, kill, rebalance: ``InvalidTransition`` -> a clear message), and a
silent no-op for Nimbus's own events (startup, monitor, remove, do-rebalance), which may
arrive after a status already changed (a delayed do-rebalance for a topology that was
killed meanwhile).
"""
from __future__ import annotations

import copy
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stormpy.thrift import storm


class Status(enum.IntEnum):
    """Topology status; values equal ``storm.TopologyStatus`` so they go straight into StormBase."""

    ACTIVE = storm.TopologyStatus.ACTIVE
    INACTIVE = storm.TopologyStatus.INACTIVE
    REBALANCING = storm.TopologyStatus.REBALANCING
    KILLED = storm.TopologyStatus.KILLED


class Event(str, enum.Enum):
    ACTIVATE = "activate"
    DEACTIVATE = "deactivate"
    KILL = "kill"
    REBALANCE = "rebalance"
    STARTUP = "startup"
    MONITOR = "monitor"
    REMOVE = "remove"
    DO_REBALANCE = "do-rebalance"


USER_EVENTS = frozenset({Event.ACTIVATE, Event.DEACTIVATE, Event.KILL, Event.REBALANCE})


@dataclass(frozen=True)
class KillArgs:
    """Argument of ``kill``: seconds between deactivating spouts and removing the topology."""

    wait_secs: int


@dataclass(frozen=True)
class RebalanceArgs:
    """Argument of ``rebalance``: wait, and optionally a new worker count / per-component executors."""

    wait_secs: int
    num_workers: int | None = None
    num_executors: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------- effects
@dataclass(frozen=True)
class Schedule:
    """Send ``event`` to the topology after ``delay_secs`` (survives restarts via ``startup``)."""

    event: Event
    delay_secs: int


@dataclass(frozen=True)
class Reassign:
    """Compute and write the assignment; ``scratch`` re-spreads every executor (rebalance)."""

    scratch: bool = False


@dataclass(frozen=True)
class Remove:
    """Delete the topology from ZooKeeper and its code from stormdist."""


Effect = Schedule | Reassign | Remove


@dataclass(frozen=True)
class Outcome:
    """What a transition decided: ``base`` to write (None: unchanged) and effects, in order.

    Nimbus performs ``Reassign`` (with the new base) first, then writes ``base``, then the
    other effects in the listed order.
    """

    base: storm.StormBase | None = None
    effects: tuple[Effect, ...] = ()


NOTHING = Outcome()


class InvalidTransition(Exception):
    """No transition for (status, event); the message is fit for a user."""

    def __init__(self, status: Status, event: Event, name: str = "") -> None:
        self.status, self.event = status, event
        who = f"topology {name!r}" if name else "topology"
        super().__init__(f"cannot {event.value} {who}: it is {status.name}")


Transition = Callable[[storm.StormBase, Any], Outcome]


# ---------------------------------------------------------------- transitions
def _with(base: storm.StormBase, **changes: Any) -> storm.StormBase:
    new = copy.deepcopy(base)
    for name, value in changes.items():
        setattr(new, name, value)
    return new


def set_status(status: Status) -> Transition:
    def step(base: storm.StormBase, _arg: Any) -> Outcome:
        return Outcome(_with(base, status=int(status)))
    step.__name__ = f"set_status_{status.name.lower()}"
    return step


def nothing(base: storm.StormBase, _arg: Any) -> Outcome:
    return NOTHING


def kill(base: storm.StormBase, arg: KillArgs) -> Outcome:
    """KILLED now (workers deactivate spouts on seeing it), removal after ``wait_secs``."""
    options = storm.TopologyActionOptions(kill_options=storm.KillOptions(wait_secs=arg.wait_secs))
    prev = base.status if base.status != Status.KILLED else base.prev_status
    return Outcome(_with(base, status=int(Status.KILLED), prev_status=prev, topology_action_options=options),
                   (Schedule(Event.REMOVE, arg.wait_secs),))


def rebalance(base: storm.StormBase, arg: RebalanceArgs) -> Outcome:
    """REBALANCING for ``wait_secs``, remembering the status to return to and the new sizes."""
    options = storm.TopologyActionOptions(rebalance_options=storm.RebalanceOptions(
        wait_secs=arg.wait_secs, num_workers=arg.num_workers, num_executors=dict(arg.num_executors) or None))
    return Outcome(_with(base, status=int(Status.REBALANCING), prev_status=base.status,
                         topology_action_options=options),
                   (Schedule(Event.DO_REBALANCE, arg.wait_secs),))


def do_rebalance(base: storm.StormBase, _arg: Any) -> Outcome:
    """Apply the stored sizes, re-spread every executor, return to the previous status."""
    options = base.topology_action_options.rebalance_options if base.topology_action_options else None
    num_workers = base.num_workers
    executors = dict(base.component_executors or {})
    if options is not None:
        num_workers = options.num_workers or num_workers
        executors.update(options.num_executors or {})
    back_to = base.prev_status if base.prev_status in (Status.ACTIVE, Status.INACTIVE) else int(Status.ACTIVE)
    new = _with(base, status=back_to, prev_status=int(Status.REBALANCING), num_workers=num_workers,
                component_executors=executors, topology_action_options=None)
    return Outcome(new, (Reassign(scratch=True),))


def remove(base: storm.StormBase, _arg: Any) -> Outcome:
    return Outcome(None, (Remove(),))


def reassign(base: storm.StormBase, _arg: Any) -> Outcome:
    return Outcome(None, (Reassign(scratch=False),))


def _stored_delay(base: storm.StormBase) -> int:
    options = base.topology_action_options
    if options is not None and options.kill_options is not None:
        return int(options.kill_options.wait_secs or 0)
    if options is not None and options.rebalance_options is not None:
        return int(options.rebalance_options.wait_secs or 0)
    return 0


def restart_removal(base: storm.StormBase, _arg: Any) -> Outcome:
    """After a Nimbus restart a KILLED topology's removal is scheduled again."""
    return Outcome(None, (Schedule(Event.REMOVE, _stored_delay(base)),))


def restart_rebalance(base: storm.StormBase, _arg: Any) -> Outcome:
    """After a Nimbus restart a REBALANCING topology's do-rebalance is scheduled again."""
    return Outcome(None, (Schedule(Event.DO_REBALANCE, _stored_delay(base)),))


# ---------------------------------------------------------------- THE table
TRANSITIONS: dict[tuple[Status, Event], Transition] = {
    (Status.ACTIVE, Event.ACTIVATE): nothing,
    (Status.ACTIVE, Event.DEACTIVATE): set_status(Status.INACTIVE),
    (Status.ACTIVE, Event.KILL): kill,
    (Status.ACTIVE, Event.REBALANCE): rebalance,
    (Status.ACTIVE, Event.STARTUP): nothing,
    (Status.ACTIVE, Event.MONITOR): reassign,

    (Status.INACTIVE, Event.ACTIVATE): set_status(Status.ACTIVE),
    (Status.INACTIVE, Event.DEACTIVATE): nothing,
    (Status.INACTIVE, Event.KILL): kill,
    (Status.INACTIVE, Event.REBALANCE): rebalance,
    (Status.INACTIVE, Event.STARTUP): nothing,
    (Status.INACTIVE, Event.MONITOR): reassign,

    (Status.KILLED, Event.KILL): kill,
    (Status.KILLED, Event.STARTUP): restart_removal,
    (Status.KILLED, Event.REMOVE): remove,

    (Status.REBALANCING, Event.KILL): kill,
    (Status.REBALANCING, Event.STARTUP): restart_rebalance,
    (Status.REBALANCING, Event.DO_REBALANCE): do_rebalance,
}


def apply(base: storm.StormBase, event: Event, arg: Any = None) -> Outcome:
    """The outcome of ``event`` for a topology whose StormBase is ``base``.

    Raises InvalidTransition for a user event without a row; Nimbus's own events without a
    row do nothing.
    """
    status = Status(base.status)
    step = TRANSITIONS.get((status, event))
    if step is None:
        if event in USER_EVENTS:
            raise InvalidTransition(status, event, base.name)
        return NOTHING
    return step(base, arg)
