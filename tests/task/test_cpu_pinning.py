"""Which CPU a cluster worker pins its busy threads to (``slot_cpu``), and children started by
the framework getting the whole process's CPUs back (``process_affinity``), issue 24."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import pytest

from stormpy.task.runtime import pinned_workers, process_affinity, slot_cpu, worker_cpu

TWO_CPUS = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                              reason="needs a Linux process allowed on at least two CPUs")


def test_a_workers_cpu_is_its_slots_index_round_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORMPY_PIN_CPU", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5, 7})
    ports = [6703, 6700, 6702, 6701]   # as configured: the index is among the sorted ports
    none: Any = lambda cpus: {}   # no other pinned workers on the host
    assert [slot_cpu(p, ports, none) for p in (6700, 6701, 6702, 6703)] == [2, 5, 7, 2]
    assert slot_cpu(6800, ports, none) is None, "not a slot port: the OS places the threads"
    assert slot_cpu(6700, ["6700", "6701"], none) == 2, "ports as strings (YAML) count too"
    monkeypatch.setenv("STORMPY_PIN_CPU", "0")
    assert slot_cpu(6701, ports, none) is None
    monkeypatch.delenv("STORMPY_PIN_CPU")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert slot_cpu(6701, ports, none) is None, "one CPU: nothing to choose"


def test_another_supervisors_pinned_workers_move_a_worker_to_the_least_used_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two supervisors on one host (a network namespace per host) both number their slots from
    0: the second's first worker takes the CPU the first's did not."""
    monkeypatch.delenv("STORMPY_PIN_CPU", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    ports = [6700, 6701]
    assert slot_cpu(6700, ports, lambda cpus: {0: 1}) == 1
    assert slot_cpu(6701, ports, lambda cpus: {0: 1}) == 1, "the slot's own CPU is free: kept"
    assert slot_cpu(6700, ports, lambda cpus: {0: 1, 1: 1}) == 2
    assert slot_cpu(6700, ports, lambda cpus: {0: 1, 1: 1, 2: 1}) == 0, "all taken alike: the slot's"


@TWO_CPUS
def test_pinned_workers_counts_worker_processes_pinned_to_one_cpu() -> None:
    cpu = max(os.sched_getaffinity(0))
    script = "import os, sys, time; os.sched_setaffinity(0, {int(sys.argv[1])}); print(flush=True); time.sleep(60)"
    pinned = subprocess.Popen([sys.executable, "-c", script, str(cpu), "stormpy.worker"], stdout=subprocess.PIPE)
    other = subprocess.Popen([sys.executable, "-c", script, str(cpu), "not-a-worker"], stdout=subprocess.PIPE)
    try:
        for child in (pinned, other):
            assert child.stdout is not None and child.stdout.readline() == b"\n"   # pinned by now
        assert worker_cpu(pinned.pid) == cpu
        assert worker_cpu(other.pid) is None, "pinned, but no stormpy worker"
        assert worker_cpu(os.getpid()) is None
        assert pinned_workers(sorted(os.sched_getaffinity(0))).get(cpu, 0) >= 1
    finally:
        for child in (pinned, other):
            child.kill()
            child.wait(10)


@TWO_CPUS
def test_a_child_started_in_the_block_gets_every_cpu_from_a_pinned_thread() -> None:
    everything = os.sched_getaffinity(0)
    one = min(everything)
    seen: dict[str, Any] = {}

    def pinned_thread() -> None:
        os.sched_setaffinity(0, {one})   # this thread only (Linux)
        probe = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
        seen["outside"] = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
        with process_affinity():
            seen["inside"] = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
        seen["after"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=pinned_thread)
    thread.start()
    thread.join(60)
    assert seen["outside"] == str([one]), "a child inherits the starting thread's mask"
    assert seen["inside"] == str(sorted(everything))
    assert seen["after"] == {one}, "the thread is pinned again after the block"
    assert os.sched_getaffinity(0) == everything, "other threads were never touched"
