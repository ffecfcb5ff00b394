"""A multilang subprocess that dies is named the same way whichever side of its pipes
the executor touches first: the write that breaks, or the read that meets the end."""
from __future__ import annotations

import logging
import sys

import pytest

from stormpy.multilang.process import ShellProcess, ShellProcessDied

log = logging.getLogger(__name__)

# Reads nothing, exits 3 at once: stdin's pipe breaks and stdout ends.
EXIT_3 = [sys.executable, "-c", "import sys; sys.exit(3)"]


def test_a_write_to_a_process_that_exited_names_its_exit_code() -> None:
    process = ShellProcess(EXIT_3, "exits", log)
    try:
        process.proc.wait(timeout=10)
        with pytest.raises(ShellProcessDied, match=r"exited \(exit code 3\)"):
            for _ in range(100):   # the pipe buffer may take the first writes
                process.send({"payload": "x" * 65536})
    finally:
        process.kill()


def test_a_read_after_a_process_exited_names_its_exit_code() -> None:
    process = ShellProcess(EXIT_3, "exits", log)
    try:
        with pytest.raises(ShellProcessDied, match=r"exited \(exit code 3\)"):
            process.read(timeout=10)
    finally:
        process.kill()


def test_a_process_that_closed_stdin_but_runs_is_said_to_have_stopped_reading() -> None:
    argv = [sys.executable, "-c", "import os, time; os.close(0); time.sleep(30)"]
    process = ShellProcess(argv, "deaf", log)
    try:
        with pytest.raises(ShellProcessDied, match=r"stopped reading \(still running\)"):
            for _ in range(100):
                process.send({"payload": "x" * 65536})
    finally:
        process.kill()
