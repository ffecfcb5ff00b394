"""The README's benchmark commands name scripts and options that exist.

Running them as written takes minutes each on 2 cores (they measure, they do not check), so
the suite runs each script's ``--help`` and checks that every option the README passes is one
the script accepts: a renamed script or option cannot leave the README's figures pointing at a
command that no longer runs. The figures themselves come from one run each, by hand.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# ``\s``, not a space: a command wrapped across README lines is still found (and checked).
COMMAND = re.compile(r"`python\s+(benchmarks/[\w]+\.py)((?:\s[^`]*)?)`")


def readme_commands() -> list[tuple[str, list[str]]]:
    text = (REPO / "README.md").read_text()
    found = [(m.group(1), m.group(2).split()) for m in COMMAND.finditer(text)]
    return found


def test_the_readme_shows_benchmark_commands() -> None:
    scripts = {script for script, _ in readme_commands()}
    assert {"benchmarks/cluster_wordcount.py", "benchmarks/local_wordcount.py"} <= scripts, scripts


@pytest.mark.parametrize("script,args", readme_commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_readme_benchmark_command_parses(script: str, args: list[str]) -> None:
    path = REPO / script
    assert path.is_file(), f"README shows {script}, which does not exist"
    shown = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                           timeout=120, cwd=REPO, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert shown.returncode == 0, shown.stderr[-2000:]
    options = [a.split("=")[0] for a in args if a.startswith("--")]
    missing = [o for o in options if not re.search(rf"(^|\s){re.escape(o)}\b", shown.stdout, re.M)]
    assert not missing, f"{script} does not accept {missing}:\n{shown.stdout}"
