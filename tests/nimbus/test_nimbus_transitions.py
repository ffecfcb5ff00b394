"""The status state machine: one test per row of TRANSITIONS, plus the missing-row rules (pure)."""
from __future__ import annotations

import copy

import pytest

from stormpy.nimbus.transitions import (
    TRANSITIONS,
    Event,
    InvalidTransition,
    KillArgs,
    Outcome,
    RebalanceArgs,
    Reassign,
    Remove,
    Schedule,
    Status,
    apply,
)
from stormpy.thrift import storm

KILL = KillArgs(wait_secs=7)
REBALANCE = RebalanceArgs(wait_secs=5, num_workers=3, num_executors={"count": 2})


def base(status: Status, prev: Status | None = None, options: object = None) -> storm.StormBase:
    return storm.StormBase(name="wc", status=int(status), num_workers=2, component_executors={"count": 4, "spout": 1},
                           launch_time_secs=100, prev_status=int(prev) if prev else None,
                           topology_action_options=options)


KILL_OPTS = storm.TopologyActionOptions(kill_options=storm.KillOptions(wait_secs=9))
REBAL_OPTS = storm.TopologyActionOptions(rebalance_options=storm.RebalanceOptions(
    wait_secs=4, num_workers=5, num_executors={"count": 3}))


def check_status(outcome: Outcome, status: Status) -> None:
    assert outcome.base is not None and outcome.base.status == status


def expect_nothing(outcome: Outcome) -> None:
    assert outcome == Outcome()


def expect_killed(outcome: Outcome, prev: Status) -> None:
    check_status(outcome, Status.KILLED)
    assert outcome.base.prev_status == prev
    assert outcome.base.topology_action_options.kill_options.wait_secs == 7
    assert outcome.effects == (Schedule(Event.REMOVE, 7),)


def expect_rebalancing(outcome: Outcome, prev: Status) -> None:
    check_status(outcome, Status.REBALANCING)
    assert outcome.base.prev_status == prev
    opts = outcome.base.topology_action_options.rebalance_options
    assert (opts.wait_secs, opts.num_workers, opts.num_executors) == (5, 3, {"count": 2})
    assert outcome.effects == (Schedule(Event.DO_REBALANCE, 5),)


# (status, event) -> (starting base, argument, check). Exactly the keys of TRANSITIONS.
ROWS = {
    (Status.ACTIVE, Event.ACTIVATE): (base(Status.ACTIVE), None, expect_nothing),
    (Status.ACTIVE, Event.DEACTIVATE): (base(Status.ACTIVE), None,
                                        lambda o: (check_status(o, Status.INACTIVE), o.effects == ())),
    (Status.ACTIVE, Event.KILL): (base(Status.ACTIVE), KILL, lambda o: expect_killed(o, Status.ACTIVE)),
    (Status.ACTIVE, Event.REBALANCE): (base(Status.ACTIVE), REBALANCE,
                                       lambda o: expect_rebalancing(o, Status.ACTIVE)),
    (Status.ACTIVE, Event.STARTUP): (base(Status.ACTIVE), None, expect_nothing),
    (Status.ACTIVE, Event.MONITOR): (base(Status.ACTIVE), None,
                                     lambda o: o == Outcome(None, (Reassign(scratch=False),))),
    (Status.INACTIVE, Event.ACTIVATE): (base(Status.INACTIVE), None, lambda o: check_status(o, Status.ACTIVE)),
    (Status.INACTIVE, Event.DEACTIVATE): (base(Status.INACTIVE), None, expect_nothing),
    (Status.INACTIVE, Event.KILL): (base(Status.INACTIVE), KILL, lambda o: expect_killed(o, Status.INACTIVE)),
    (Status.INACTIVE, Event.REBALANCE): (base(Status.INACTIVE), REBALANCE,
                                         lambda o: expect_rebalancing(o, Status.INACTIVE)),
    (Status.INACTIVE, Event.STARTUP): (base(Status.INACTIVE), None, expect_nothing),
    (Status.INACTIVE, Event.MONITOR): (base(Status.INACTIVE), None,
                                       lambda o: o == Outcome(None, (Reassign(scratch=False),))),
    (Status.KILLED, Event.KILL): (base(Status.KILLED, Status.ACTIVE, KILL_OPTS), KILL,
                                  lambda o: expect_killed(o, Status.ACTIVE)),
    (Status.KILLED, Event.STARTUP): (base(Status.KILLED, Status.ACTIVE, KILL_OPTS), None,
                                     lambda o: o == Outcome(None, (Schedule(Event.REMOVE, 9),))),
    (Status.KILLED, Event.REMOVE): (base(Status.KILLED, Status.ACTIVE, KILL_OPTS), None,
                                    lambda o: o == Outcome(None, (Remove(),))),
    (Status.REBALANCING, Event.KILL): (base(Status.REBALANCING, Status.INACTIVE, REBAL_OPTS), KILL,
                                       lambda o: expect_killed(o, Status.REBALANCING)),
    (Status.REBALANCING, Event.STARTUP): (base(Status.REBALANCING, Status.ACTIVE, REBAL_OPTS), None,
                                          lambda o: o == Outcome(None, (Schedule(Event.DO_REBALANCE, 4),))),
    (Status.REBALANCING, Event.DO_REBALANCE): (base(Status.REBALANCING, Status.INACTIVE, REBAL_OPTS), None,
                                               None),
}


def test_rows_cover_the_table_exactly() -> None:
    assert set(ROWS) == set(TRANSITIONS)


@pytest.mark.parametrize("row", sorted(ROWS, key=lambda r: (r[0].name, r[1].value)),
                         ids=lambda r: f"{r[0].name}-{r[1].value}")
def test_row(row: tuple[Status, Event]) -> None:
    start, arg, check = ROWS[row]
    before = copy.deepcopy(start)
    outcome = apply(start, row[1], arg)
    if check is not None:
        result = check(outcome)
        if isinstance(result, bool):
            assert result, outcome
        elif isinstance(result, tuple):
            assert all(r is not False for r in result), outcome
    assert start == before, "transitions must not mutate their input"


def test_do_rebalance_applies_sizes_and_returns_to_previous_status() -> None:
    outcome = apply(base(Status.REBALANCING, Status.INACTIVE, REBAL_OPTS), Event.DO_REBALANCE)
    assert outcome.base.status == Status.INACTIVE
    assert outcome.base.num_workers == 5
    assert outcome.base.component_executors == {"count": 3, "spout": 1}
    assert outcome.base.topology_action_options is None
    assert outcome.effects == (Reassign(scratch=True),)


@pytest.mark.parametrize("status,event", [(Status.KILLED, Event.ACTIVATE), (Status.KILLED, Event.DEACTIVATE),
                                          (Status.KILLED, Event.REBALANCE), (Status.REBALANCING, Event.ACTIVATE),
                                          (Status.REBALANCING, Event.DEACTIVATE),
                                          (Status.REBALANCING, Event.REBALANCE)])
def test_user_event_without_row_is_refused(status: Status, event: Event) -> None:
    with pytest.raises(InvalidTransition, match=f"cannot {event.value} topology 'wc': it is {status.name}"):
        apply(base(status, Status.ACTIVE), event, REBALANCE if event == Event.REBALANCE else None)


@pytest.mark.parametrize("status,event", [(Status.KILLED, Event.MONITOR), (Status.REBALANCING, Event.MONITOR),
                                          (Status.ACTIVE, Event.REMOVE), (Status.ACTIVE, Event.DO_REBALANCE),
                                          (Status.KILLED, Event.DO_REBALANCE)])
def test_internal_event_without_row_does_nothing(status: Status, event: Event) -> None:
    assert apply(base(status, Status.ACTIVE), event) == Outcome()
