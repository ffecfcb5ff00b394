"""The engine type-checks: ``mypy --strict`` on ``stormpy/task`` and ``stormpy/acker`` (issue 21).

The settings are in ``pyproject.toml`` (``[tool.mypy]``); the run is the same command a
developer types, from the repository root, so CI and a local check cannot disagree.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict_passes_on_the_engine() -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install 'stormpy-streams[test]')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                             "stormpy/task", "stormpy/acker"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"mypy --strict failed:\n{result.stdout}{result.stderr}"
    assert "Success" in result.stdout
