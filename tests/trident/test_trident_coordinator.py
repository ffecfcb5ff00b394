"""The pure master batch coordinator: attempts, commit order, failure replay, max pending."""
from __future__ import annotations

from stormpy.trident.coordinator import (BATCH_STREAM, COMMIT_STREAM, SUCCESS_STREAM, CoordinatorMachine, Emit,
                                         Save)


def emits(effects):
    return [(e.stream, e.txid, e.attempt) for e in effects if isinstance(e, Emit)]


def test_first_batch_then_throttled_by_interval():
    m = CoordinatorMachine(max_pending=3, emit_interval_secs=1.0)
    assert emits(m.step(0.0)) == [(BATCH_STREAM, 1, 0)]
    assert emits(m.step(0.5)) == []            # interval not over
    assert emits(m.step(1.0)) == [(BATCH_STREAM, 2, 0)]


def test_max_pending_limits_active_txids():
    m = CoordinatorMachine(max_pending=2, emit_interval_secs=0)
    assert emits(m.step(0)) == [(BATCH_STREAM, 1, 0), (BATCH_STREAM, 2, 0)]
    assert emits(m.step(1)) == []
    assert m.in_flight() == 2


def test_processing_commit_success_in_order():
    m = CoordinatorMachine(max_pending=2, emit_interval_secs=0)
    m.step(0)
    # txid 2 finishes processing first: it must not commit before txid 1
    assert COMMIT_STREAM not in [s for s, _, _ in emits(m.on_ack(BATCH_STREAM, 2, 0, 1))]
    assert emits(m.on_ack(BATCH_STREAM, 1, 0, 2)) == [(COMMIT_STREAM, 1, 0)]
    effects = m.on_ack(COMMIT_STREAM, 1, 0, 3)
    out = emits(effects)
    assert out[0] == (SUCCESS_STREAM, 1, 0)
    assert (COMMIT_STREAM, 2, 0) in out          # 2 was processed: commits next
    assert (BATCH_STREAM, 3, 0) in out           # the freed slot starts txid 3
    saves = [e for e in effects if isinstance(e, Save)]
    assert saves[0].current_txid == 2
    success = [e for e in effects if isinstance(e, Emit) and e.stream == SUCCESS_STREAM][0]
    assert success.tracked is False


def test_fail_clears_the_tail_and_replays_as_new_attempts():
    m = CoordinatorMachine(max_pending=3, emit_interval_secs=0)
    m.step(0)
    m.on_ack(BATCH_STREAM, 3, 0, 1)
    out = emits(m.on_fail(BATCH_STREAM, 2, 0, 2))
    # 2 and 3 restart with new attempts; 1 keeps running
    assert out == [(BATCH_STREAM, 2, 1), (BATCH_STREAM, 3, 1)]
    assert m.active[1].attempt == 0


def test_stale_ack_and_fail_are_ignored():
    m = CoordinatorMachine(max_pending=1, emit_interval_secs=0)
    m.step(0)
    m.on_fail(BATCH_STREAM, 1, 0, 1)           # attempt 1 now live
    assert emits(m.on_ack(BATCH_STREAM, 1, 0, 2)) == []
    assert m.active[1].attempt == 1
    assert emits(m.on_fail(BATCH_STREAM, 1, 0, 3)) == []
    assert emits(m.on_ack(BATCH_STREAM, 1, 1, 4)) == [(COMMIT_STREAM, 1, 1)]


def test_commit_failure_replays_the_txid():
    m = CoordinatorMachine(max_pending=1, emit_interval_secs=0)
    m.step(0)
    m.on_ack(BATCH_STREAM, 1, 0, 1)
    assert emits(m.on_fail(COMMIT_STREAM, 1, 0, 2)) == [(BATCH_STREAM, 1, 1)]


def test_resume_uses_saved_txid_and_higher_attempts():
    m = CoordinatorMachine(current_txid=7, attempts={7: 4}, max_pending=2, emit_interval_secs=0)
    assert emits(m.step(0)) == [(BATCH_STREAM, 7, 5), (BATCH_STREAM, 8, 0)]


def test_deactivated_coordinator_still_commits_but_starts_nothing():
    m = CoordinatorMachine(max_pending=2, emit_interval_secs=0)
    m.step(0)
    m.set_running(False)
    assert emits(m.on_ack(BATCH_STREAM, 1, 0, 1)) == [(COMMIT_STREAM, 1, 0)]
    out = emits(m.on_ack(COMMIT_STREAM, 1, 0, 2))
    assert out == [(SUCCESS_STREAM, 1, 0)]


def test_a_commit_and_the_batch_started_after_it_save_once_before_any_emit():
    m = CoordinatorMachine(max_pending=1, emit_interval_secs=0)
    assert [type(e) for e in m.step(0)] == [Save, Emit]
    m.on_ack(BATCH_STREAM, 1, 0, 1)
    effects = m.on_ack(COMMIT_STREAM, 1, 0, 2)
    # the position after the commit and txid 2's attempt (without txid 1's), then the emits
    assert isinstance(effects[0], Save) and (effects[0].current_txid, effects[0].attempts) == (2, {2: 0})
    assert emits(effects) == [(SUCCESS_STREAM, 1, 0), (BATCH_STREAM, 2, 0)]
    assert sum(isinstance(e, Save) for e in effects) == 1


def test_a_commit_alone_saves_the_position_only():
    m = CoordinatorMachine(max_pending=1, emit_interval_secs=0)
    m.step(0)
    m.on_ack(BATCH_STREAM, 1, 0, 1)
    m.set_running(False)                        # nothing starts after the commit
    saves = [e for e in m.on_ack(COMMIT_STREAM, 1, 0, 2) if isinstance(e, Save)]
    assert [(s.current_txid, s.attempts) for s in saves] == [(2, None)]


def test_resume_ignores_stored_attempts_of_committed_txids():
    # currtx 5 was written at the commit of 4; the attempts stored before still name 4
    m = CoordinatorMachine(current_txid=5, attempts={4: 2, 5: 1}, max_pending=1, emit_interval_secs=0)
    saves = [e for e in m.step(0) if isinstance(e, Save)]
    assert emits(m.step(0)) == [] and m.active[5].attempt == 2
    assert saves[0].attempts == {5: 2}
