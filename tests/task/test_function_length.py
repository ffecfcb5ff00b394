"""No function of the engine's task package is longer than 60 lines (issue 21).

Long functions were where the tuple-tree arithmetic hid (``make_emit``, the driver's loop);
the limit keeps each step small enough to read at once. Counted from ``def`` to the last
line of the body, decorators and docstring included.
"""
from __future__ import annotations

import ast
from pathlib import Path

import stormpy.task

MAX_LINES = 60
TASK_DIR = Path(stormpy.task.__file__).resolve().parent


def long_functions(path: Path, limit: int = MAX_LINES) -> list[str]:
    """``file:line name (n lines)`` for each function of ``path`` longer than ``limit``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append(f"{path.name}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_in_task_is_over_60_lines() -> None:
    files = sorted(TASK_DIR.glob("*.py"))
    assert any(f.name == "tree.py" for f in files), f"not the task package: {TASK_DIR}"
    too_long = [entry for path in files for entry in long_functions(path)]
    assert too_long == [], f"functions over {MAX_LINES} lines: {too_long}"


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    source = tmp_path / "long.py"
    source.write_text("def f():\n" + "    x = 1\n" * 61)
    assert long_functions(source) == ["long.py:1 f (62 lines)"]
