"""The layout of stormpy/trident (issue 21): four layers read top-down, no Spark, small modules,
and every module path of before the split still importable.

api -> planner -> runtime -> state: a module may import its own layer or a lower one, never a
higher one, and nothing of Trident imports stormpy.spark (SparkState lives in the Spark package,
which depends on Trident's state contract). Imports are read from the source (``ast``), those
inside functions included, so a lazy import cannot hide an arrow.
"""
from __future__ import annotations

import ast
import importlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import stormpy.trident

TRIDENT = Path(stormpy.trident.__file__).parent
LAYERS = ("api", "planner", "runtime", "state")   # top to bottom
MAX_LINES = 400

#: every module of stormpy/trident before the split (users, benchmarks and pickled topologies name them)
OLD_MODULES = ("topology", "updaters", "graph", "compile", "validate", "placement", "bolts", "coordinator",
               "processors", "batch", "spouts", "stats", "operations", "state", "memory_state", "sqlite_state",
               "redis_state", "txstate", "spark_state")

#: the public names the old single module stormpy/trident/state.py defined
OLD_STATE_NAMES = ("TRANSACTIONAL", "OPAQUE", "NON_TRANSACTIONAL", "KINDS", "OPAQUE_LOG_KEY", "FENCE_KEY",
                   "OWNER_KEY", "RESERVED_PREFIX", "StateFencedError", "is_reserved_key", "State", "StateFactory",
                   "StateUpdater", "BackingMap", "MapState", "TransactionalMap", "OpaqueMap", "NonTransactionalMap",
                   "Fence", "supports_fencing", "check_kind", "MapStateFactory", "map_state_factory", "CachedMap",
                   "BackingMaker", "encode_key", "decode_key", "encode_value", "decode_value")


def _modules() -> list[Path]:
    return sorted(TRIDENT.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(TRIDENT.parent.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, package: str = "") -> list[tuple[int, str]]:
    """(line, module) for every import in the file, at any depth; ``from P import m`` yields P.m
    when P.m is a module, else P. ``package``: the file's package (for relative imports)."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                is_module = (TRIDENT.parent.parent / sub.replace(".", "/")).with_suffix(".py").exists() or \
                    (TRIDENT.parent.parent / sub.replace(".", "/") / "__init__.py").exists()
                found.append((node.lineno, sub if is_module else base))
    return found


def _trident_imports(path: Path) -> list[tuple[int, str]]:
    name = _module_name(path)
    return _imports(path, name if path.name == "__init__.py" else name.rpartition(".")[0])


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["stormpy", "trident"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in LAYERS else None


def test_no_trident_module_over_400_lines() -> None:
    too_long = {str(p.relative_to(TRIDENT)): n for p in _modules()
                if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not too_long, f"modules of stormpy/trident over {MAX_LINES} lines: {too_long}"


def test_trident_does_not_import_spark() -> None:
    offenders = [f"{p.relative_to(TRIDENT)}:{line} imports {mod}" for p in _modules()
                 for line, mod in _trident_imports(p) if mod == "stormpy.spark" or mod.startswith("stormpy.spark.")]
    assert not offenders, "Trident knows a state contract, not Spark:\n" + "\n".join(offenders)


def test_layers_import_only_downwards() -> None:
    offenders = []
    for path in _modules():
        src = _layer(_module_name(path))
        if src is None:
            continue   # stormpy/trident/__init__.py (the user's face) and _moved.py may import any layer
        for line, mod in _trident_imports(path):
            if mod == "stormpy.trident" or (mod.startswith("stormpy.trident.") and _layer(mod) is None):
                offenders.append(f"{path.relative_to(TRIDENT)}:{line} imports {mod} (the package face)")
                continue
            dst = _layer(mod)
            if dst is not None and LAYERS.index(dst) < LAYERS.index(src):
                offenders.append(f"{path.relative_to(TRIDENT)}:{line} imports {mod} ({src} -> {dst}: upwards)")
    assert not offenders, "Trident's layers are api -> planner -> runtime -> state:\n" + "\n".join(offenders)


def test_the_layout_check_sees_a_function_level_import(tmp_path: Path) -> None:
    """The checks above read imports inside functions too (a lazy import is still an arrow)."""
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n"
                      "    from stormpy.spark.session import acquire_session\n"
                      "    import stormpy.trident.api\n")
    assert [mod for _, mod in _imports(sample)] == ["stormpy.spark.session", "stormpy.trident.api"]


@pytest.mark.parametrize("old", OLD_MODULES)
def test_old_module_path_still_imports(old: str) -> None:
    module = importlib.import_module(f"stormpy.trident.{old}")
    if old == "state":
        missing = [name for name in OLD_STATE_NAMES if not hasattr(module, name)]
        assert not missing, f"stormpy.trident.state lost {missing}"
    else:
        # an alias: the very module at the new path, so private names and isinstance hold too
        assert module.__name__ != f"stormpy.trident.{old}"
        assert module is sys.modules[module.__name__]
        assert module.__spec__.name == module.__name__


def test_old_paths_resolve_in_a_fresh_process_and_in_old_pickles() -> None:
    """A worker of a topology submitted before the split: its plan names ``stormpy.trident.bolts:TridentBolt``
    and its pickles name classes and functions by their old modules; the old path may be the first
    Trident import of the process."""
    code = (
        "import importlib, pickle\n"
        # as a worker resolves the class path stormpy.trident.bolts:TridentBolt
        "bolt = getattr(importlib.import_module('stormpy.trident.bolts'), 'TridentBolt')\n"
        "assert bolt.__module__ == 'stormpy.trident.runtime.bolts'\n"
        "from stormpy.trident.spark_state import SparkState\n"
        "assert SparkState.__module__ == 'stormpy.spark.trident_state'\n"
        "restore = pickle.loads(b'cstormpy.trident.redis_state\\n_restore\\n.')\n"
        "assert restore.__module__ == 'stormpy.trident.state.redis'\n"
        "assert pickle.loads(b'cstormpy.trident.state\\nBackingMaker\\n.').__name__ == 'BackingMaker'\n"
        "print('ok')\n")
    env = {**os.environ, "PYTHONPATH": str(TRIDENT.parent.parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_planner_module_loads_neither_the_api_nor_the_runtime() -> None:
    """The package face imports each name on first use: a daemon or tool that needs one planner
    module (the placement check) does not load the user API, the runtime or PySpark with it."""
    code = ("import sys\n"
            "import stormpy.trident.planner.placement\n"
            "loaded = [m for m in sys.modules if m.startswith(('stormpy.trident.api', 'stormpy.trident.runtime', "
            "'stormpy.trident.state', 'pyspark'))]\n"
            "print(loaded)\n")
    env = {**os.environ, "PYTHONPATH": str(TRIDENT.parent.parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_new_pickles_name_the_new_modules(tmp_path: Path) -> None:
    from stormpy.trident import SqliteMapState

    factory = SqliteMapState.opaque(tmp_path / "counts.db")
    data = pickle.dumps(factory)
    assert b"stormpy.trident.state.sqlite" in data or b"stormpy.trident.state.backing" in data
    assert pickle.loads(data).kind == factory.kind
