"""Configuration is read only through the keys declared in ``stormpy/config.py`` (issue 21).

A key spelled as a string literal outside ``config.py`` escapes the declaration's type and
default (and a typo in it is silently a different key); a hand-written ``or KEY.default``
repeats the declared default where it can drift. This scans every module of ``stormpy/``
(except ``config.py``) with ``ast`` and lists each such read, so none can come back.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from stormpy import config as cfg

PACKAGE = Path(cfg.__file__).resolve().parent
_DECLARED = set(cfg.KEYS) | set(cfg.KNOWN_UNDECLARED)
_READ_METHODS = {"get", "pop", "setdefault"}
#: Other systems' settings that happen to share a Storm namespace.
_NOT_STORM_KEYS = {"transactional.id"}          # Kafka producer
_KEY_OBJECTS = {name for name, value in vars(cfg).items() if isinstance(value, cfg.Key)}


def _is_storm_key(node: ast.AST) -> bool:
    """A string constant that names a declared key or looks like one of Storm's dotted keys."""
    return (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value not in _NOT_STORM_KEYS
            and (node.value in _DECLARED or node.value.startswith(cfg.CHECKED_NAMESPACES)))


def _is_key_default(node: ast.AST) -> bool:
    """``SOME_KEY.default`` / ``cfg.SOME_KEY.default`` for a Key declared in config.py."""
    if not (isinstance(node, ast.Attribute) and node.attr == "default"):
        return False
    base = node.value
    name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
    return name in _KEY_OBJECTS


def config_read_problems(source: str, filename: str) -> list[str]:
    """``file:line: what`` for each string-literal key read and hand-written default fallback."""
    problems = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Subscript) and _is_storm_key(node.slice):
            problems.append(f"{where}: string-literal key {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _READ_METHODS and node.args:
            if _is_storm_key(node.args[0]):
                problems.append(f"{where}: string-literal key {ast.unparse(node)}")
            if node.func.attr == "get" and len(node.args) > 1 and _is_key_default(node.args[1]):
                problems.append(f"{where}: hand-written default {ast.unparse(node)}")
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) \
                and any(_is_key_default(value) for value in node.values[1:]):
            problems.append(f"{where}: hand-written default {ast.unparse(node)}")
        elif isinstance(node, ast.IfExp) and (_is_key_default(node.body) or _is_key_default(node.orelse)):
            problems.append(f"{where}: hand-written default {ast.unparse(node)}")
    return problems


def test_config_is_read_only_through_declared_keys() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "config.py":
            continue
        problems += config_read_problems(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    assert not problems, ("read these through stormpy.config's keys (cfg.read(conf, cfg.KEY) or a Config):\n"
                          + "\n".join(problems))


@pytest.mark.parametrize("line", [
    'conf.get("topology.workers")',
    'conf["storm.local.dir"]',
    'stormconf.get("topology.tasks", 1)',
    'conf.get("storm.some.future.key")',
    'conf.get(cfg.TOPOLOGY_WORKERS.name) or cfg.TOPOLOGY_WORKERS.default',
    'conf.get(TOPOLOGY_WORKERS.name, TOPOLOGY_WORKERS.default)',
])
def test_scanner_finds_each_kind_of_read(line: str) -> None:
    assert config_read_problems(line, "x.py"), line


@pytest.mark.parametrize("line", [
    'cfg.read(conf, cfg.TOPOLOGY_WORKERS)',
    'conf.get(cfg.TOPOLOGY_WORKERS.name)',
    'conf["enable.auto.commit"] = False',          # a Kafka client key, not Storm's
    'stats["batches.failed"] += 1',
    'json.JSONEncoder.default',
])
def test_scanner_leaves_other_code_alone(line: str) -> None:
    assert not config_read_problems(line, "x.py"), line


def test_read_applies_the_declared_default_and_type() -> None:
    assert cfg.read({}, cfg.TOPOLOGY_WORKERS) == cfg.TOPOLOGY_WORKERS.default
    assert cfg.read(None, cfg.TOPOLOGY_WORKERS) == cfg.TOPOLOGY_WORKERS.default
    assert cfg.read({"topology.workers": None}, cfg.TOPOLOGY_WORKERS) == cfg.TOPOLOGY_WORKERS.default
    assert cfg.read({"topology.workers": "3"}, cfg.TOPOLOGY_WORKERS) == 3
    assert cfg.read({"topology.workers": 0}, cfg.TOPOLOGY_WORKERS) == 0
    with pytest.raises(cfg.ConfigError, match="topology.workers"):
        cfg.read({"topology.workers": "many"}, cfg.TOPOLOGY_WORKERS)
    cfg.read({}, cfg.TOPOLOGY_SERIALIZERS)["x"] = "y"           # a copy: the declaration stays
    assert cfg.TOPOLOGY_SERIALIZERS.default == {}
