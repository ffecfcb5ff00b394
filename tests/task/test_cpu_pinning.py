"""Which CPU a cluster worker pins its busy threads to (``slot_cpu``), and children started by
the framework getting the whole process's CPUs back (``process_affinity``), issue 24."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import pytest

from stormpy.task.runtime import process_affinity, slot_cpu

TWO_CPUS = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                              reason="needs a Linux process allowed on at least two CPUs")


def test_a_workers_cpu_is_its_slots_index_round_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORMPY_PIN_CPU", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5, 7})
    ports = [6703, 6700, 6702, 6701]   # as configured: the index is among the sorted ports
    assert [slot_cpu(p, ports) for p in (6700, 6701, 6702, 6703)] == [2, 5, 7, 2]
    assert slot_cpu(6800, ports) is None, "not a slot port: the OS places the threads"
    assert slot_cpu(6700, ["6700", "6701"]) == 2, "ports as strings (YAML) count too"
    monkeypatch.setenv("STORMPY_PIN_CPU", "0")
    assert slot_cpu(6701, ports) is None
    monkeypatch.delenv("STORMPY_PIN_CPU")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert slot_cpu(6701, ports) is None, "one CPU: nothing to choose"


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
