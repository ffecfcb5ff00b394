"""A worker's executor loop sets the interpreter's switch interval by load (issue 24): 1 ms
while it waits now and then, 5 ms once it has run ``BUSY_AFTER_SECS`` without waiting; and its
thread runs under the worker's guard, so that a step ending it (``SystemExit`` is no
Exception) is reported, never silent."""
from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from stormpy.task import scheduler
from stormpy.task.scheduler import ExecutorLoop


@pytest.fixture
def restore_switch_interval() -> Any:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_the_switch_interval_follows_the_load(restore_switch_interval: Any) -> None:
    loop = ExecutorLoop([])
    loop.pace_switches = True
    sys.setswitchinterval(scheduler.IDLE_SWITCH_SECS)
    loop._pace(True, 100.0)                                  # waited at t=100
    loop._pace(False, 100.0 + scheduler.BUSY_AFTER_SECS / 2)
    assert sys.getswitchinterval() == pytest.approx(scheduler.IDLE_SWITCH_SECS)
    loop._pace(False, 100.0 + scheduler.BUSY_AFTER_SECS * 2)  # busy for a while
    assert sys.getswitchinterval() == pytest.approx(scheduler.BUSY_SWITCH_SECS)
    loop._pace(True, 101.0)                                  # waits again
    assert sys.getswitchinterval() == pytest.approx(scheduler.IDLE_SWITCH_SECS)


class _Guard:
    """The part of a worker's ThreadGuard the loop uses: ``run`` reports what ends a thread."""

    def __init__(self) -> None:
        self.failed: list[tuple[str, BaseException, bool]] = []

    def run(self, name: str, target: Any, restart: bool = True) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - what the real guard does
            self.failed.append((name, exc, restart))


def test_a_loop_thread_ended_by_system_exit_is_reported_by_the_guard() -> None:
    loop = ExecutorLoop([])
    guard = _Guard()
    loop.guard = guard

    def body() -> None:
        raise SystemExit("user code called sys.exit()")

    thread = loop._new_thread(body, "executor-loop")
    assert isinstance(thread, threading.Thread) and thread.daemon
    thread.start()
    thread.join(5)
    assert [(name, type(exc), restart) for name, exc, restart in guard.failed] == [
        ("executor-loop", SystemExit, False)]
