"""DirectorySpout on the local runner over a real directory: every line of every complete file
acked, failed lines replayed, a `.COPYING` file left alone until renamed, an undecodable file
moved to bad/ with its reason reported, and a file whose owner died taken over at its progress
sidecar."""
from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stormpy import Bolt, Topology
from stormpy.files import DirectorySpout
from stormpy.local.runner import LocalTopology
from stormpy.testing import wait_until

LOCK = threading.Lock()
SEEN: Counter = Counter()
FAILED_ONCE: set[str] = set()


def reset() -> None:
    with LOCK:
        SEEN.clear()
        FAILED_ONCE.clear()


class FlakyRecorder(Bolt):
    auto_ack = False

    def process(self, tup: Any) -> None:
        line = tup.values.line
        with LOCK:
            if line.endswith("0") and line not in FAILED_ONCE:
                FAILED_ONCE.add(line)
                self.fail(tup)
                return
            SEEN[line] += 1
        self.ack(tup)


def write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def run(spout: DirectorySpout, name: str, par: int = 2) -> LocalTopology:
    class Files(Topology):
        files = spout.spec(par=par)
        sink = FlakyRecorder.spec(inputs=[files], par=2)

    return LocalTopology(Files, name, user_overrides={"topology.message.timeout.secs": 30}).start()


def test_files_read_once_each_copying_waits_bad_goes_aside(tmp_path: Path) -> None:
    reset()
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    files = {f"part-{i}.txt": [f"f{i}-line-{n}" for n in range(150)] for i in range(3)}
    for name, lines in files.items():
        write(incoming / name, lines)
    write(incoming / "late.txt.COPYING", ["late-1", "late-2"])
    (incoming / "broken.txt").write_bytes(b"fine line\n\xff\xfe not utf-8\nnever read\n")
    # a long lock timeout: a task's step stalled for seconds on the loaded machine must not let
    # the other task take its file over here (takeover has its own test below)
    local = run(DirectorySpout(incoming, pattern="*.txt*", poll_interval_secs=0.2, lock_timeout_secs=60), "files")
    try:
        every = [line for lines in files.values() for line in lines]
        wait_until(lambda: all(SEEN[line] for line in every), 60, "every line of the 3 complete files")
        wait_until(lambda: (incoming / "bad" / "broken.txt").exists(), 30, "broken.txt moved to bad/")
        wait_until(lambda: sorted(p.name for p in (incoming / "done").iterdir()) == sorted(files), 30,
                   "the 3 files moved to done/")
        assert "late-1" not in SEEN, "a .COPYING file is never read"
        os.rename(incoming / "late.txt.COPYING", incoming / "late.txt")
        wait_until(lambda: SEEN["late-1"] and SEEN["late-2"], 30, "late.txt read once renamed")
        errors = [e for errs in local.reporter.errors.values() for e in errs]
        assert any("broken.txt moved to" in str(e) and "UnicodeDecodeError" in str(e) for e in errors), errors
        # The spout finishes late.txt (releasing its lock) on a next_tuple after the last ack,
        # which may still be on its way when the bolt has seen the lines.
        wait_until(lambda: not list((incoming / ".lock").glob("*.lock")), 30, "late.txt's lock released")
    finally:
        local.stop(drain_secs=5)
    assert all(SEEN[line] == 1 for line in every), "each line processed once (no worker died here)"
    assert FAILED_ONCE, "some lines failed once and were replayed"
    assert not list((incoming / ".lock").glob("*.lock")), "locks released with finished files"


def test_a_dead_owners_file_is_taken_over_at_its_progress(tmp_path: Path) -> None:
    reset()
    incoming = tmp_path / "incoming"
    (incoming / ".lock").mkdir(parents=True)
    lines = [f"line-{n:03d}" for n in range(200)]
    write(incoming / "big.txt", lines)
    offset = sum(len(line) + 1 for line in lines[:120])
    # what a worker SIGKILLed after 120 acked lines leaves behind: its lock and progress sidecar
    (incoming / ".lock" / "big.txt.progress").write_text(json.dumps({"offset": offset, "line": 120, "owner": "dead"}))
    lock = incoming / ".lock" / "big.txt.lock"
    lock.write_text("dead")
    started = time.time()
    local = run(DirectorySpout(incoming, poll_interval_secs=0.2, lock_timeout_secs=2), "files-takeover", par=1)
    try:
        wait_until(lambda: (incoming / "done" / "big.txt").exists(), 60, "big.txt finished by the new owner")
    finally:
        local.stop(drain_secs=5)
    assert time.time() - started >= 1.5, "the lock was honoured until its timeout"
    assert sorted(SEEN) == lines[120:], "resumed at the first un-acked line, nothing before it"


def test_bad_arguments_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lock_timeout_secs must be positive"):
        DirectorySpout(tmp_path, lock_timeout_secs=0)


def test_an_idle_next_tuple_returns_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between directory scans next_tuple emits nothing and returns: the executor does the
    waiting (``topology.sleep.spout.wait.strategy.time.ms``). A sleep in next_tuple held up
    every other executor of the process's executor loop (5 ms per idle step, it was)."""
    import stormpy.files.spout as files_spout

    me, real_sleep, slept = threading.current_thread(), time.sleep, []

    def sleep(secs: float) -> None:
        if threading.current_thread() is me:
            slept.append(secs)
        real_sleep(secs)

    monkeypatch.setattr(files_spout.time, "sleep", sleep)
    spout = DirectorySpout(tmp_path, poll_interval_secs=60)
    emitted: list[Any] = []
    spout.emit = lambda values, **kw: emitted.append(values)   # type: ignore[method-assign]
    spout.initialize({}, None)
    for _ in range(20):
        spout.next_tuple()   # the first scans the empty directory; the rest are before the next scan
    assert not emitted and not slept, slept
    write(tmp_path / "one.txt", ["a line"])
    spout.next_scan = 0.0
    spout.next_tuple()
    spout.close()
    assert emitted == [["a line"]] and not slept
