"""stormpy's import structure reads top-down: one-way layers (issue 21, item 1).

Read from the code with ``ast``: module-level imports and imports inside functions alike
(an import inside a function runs too; only ``if TYPE_CHECKING:`` blocks are left out), with
relative imports resolved. Three rules:

- the daemons (Nimbus, supervisor, UI) never import the engine or the user API: their import
  closure holds no ``stormpy.task``, ``stormpy.stateful``, ``stormpy.windowing``,
  ``stormpy.multilang`` or ``stormpy.api`` module (also checked in a fresh interpreter);
- ``stormpy/topology/`` (specs, the plan, validation: pure data and checks) imports nothing of
  the user API, the engine or the streamparse aliases;
- no import goes up: every folder (and root module) of ``stormpy/`` has a layer in ``LAYERS``
  and imports only from lower layers or its own, so no two folders import each other.

``stormpy/__init__.py`` is the package's face (its names are imported on first use): it is
left out of the graph, and checked to import only the light modules it needs at once.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

import stormpy

PACKAGE = Path(stormpy.__file__).resolve().parent

#: Top to bottom; a folder (or root module) imports only from its own layer or lower ones.
LAYERS: list[set[str]] = [
    {"cli"},
    {"local", "testing", "devzk"},
    {"nimbus", "supervisor", "ui"},               # the daemons: topology, cluster_state, client.nimbus_client
    {"client"},                                   # the Thrift client; submit compiles user topologies (api)
    {"worker"},
    {"kafka", "redis", "files", "spark", "trident"},   # connectors and Trident
    {"stateful", "windowing", "multilang", "acker"},   # components built on the engine
    {"task"},                                     # the engine: executors, emit, drivers
    {"streamparse_compat"},                       # streamparse's names for the user API
    {"api"},                                      # the user API
    {"topology", "cluster_state"},                # pure model: specs, plan, validation; ZooKeeper state
    {"auth", "certs", "daemon_guard", "disk_layout", "extras", "healthcheck", "serialization", "tls"},
    {"config", "errors", "logs", "rotating_map", "signals", "streams", "thrift", "version", "zk_layout"},
]
DAEMONS = ("stormpy.nimbus", "stormpy.supervisor", "stormpy.ui")
NOT_IN_DAEMONS = ("stormpy.task", "stormpy.stateful", "stormpy.windowing", "stormpy.multilang", "stormpy.api")
NOT_IN_TOPOLOGY = ("stormpy.api", "stormpy.task", "stormpy.stateful", "stormpy.windowing", "stormpy.multilang",
                   "stormpy.streamparse_compat", "stormpy.worker")
#: What ``import stormpy`` itself imports at once.
FACE_IMPORTS = {"stormpy.streamparse_compat", "stormpy.version"}


@cache
def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: anywhere but under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


def _own_module(name: str) -> str | None:
    """The stormpy module an imported dotted name lives in (``a.b.C`` -> ``a.b``), or None."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports_of(module: str) -> frozenset[str]:
    """The stormpy modules ``module`` imports (a name imported from a package that is a
    submodule counts as that submodule, not as the package)."""
    path = modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base
                       for alias in node.names]
        for target in targets:
            own = _own_module(target) if target.split(".")[0] == "stormpy" else None
            if own is not None and own != module:
                found.add(own)
    return frozenset(found)


def closure(starts: list[str]) -> set[str]:
    """Every stormpy module importing ``starts`` runs, their parent packages included."""
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        todo.extend(imports_of(module))
    return seen


def folder(module: str) -> str | None:
    """``stormpy.task.emit`` -> ``task``; ``stormpy.config`` -> ``config``; the package face -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def folder_edges() -> dict[tuple[str, str], list[str]]:
    """(importing folder, imported folder) -> the module imports behind that arrow."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module in modules():
        for target in imports_of(module):
            a, b = folder(module), folder(target)
            if a is not None and b is not None and a != b:
                edges.setdefault((a, b), []).append(f"{module} -> {target}")
    return edges


def strongly_connected(nodes: set[str], edges: set[tuple[str, str]]) -> list[set[str]]:
    """Tarjan's components with more than one node: the import circles between folders."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        succ[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in succ[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(component)

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return circles


def _daemon_modules() -> list[str]:
    return sorted(m for m in modules() if m.startswith(tuple(d + "." for d in DAEMONS)) or m in DAEMONS)


def test_the_daemons_import_no_engine_and_no_user_api() -> None:
    reached = closure(_daemon_modules())
    bad = sorted(m for m in reached if m.startswith(NOT_IN_DAEMONS))
    assert not bad, f"the daemons' imports reach {bad}"


def test_the_daemons_import_no_engine_when_run() -> None:
    """The same rule in a fresh interpreter: what importing every daemon module loads, with the
    CLI module whose commands start them (``stormpy nimbus`` imports ``stormpy.nimbus.daemon``
    from the command's function)."""
    names = ", ".join(["stormpy.cli", *_daemon_modules()])
    code = (f"import {names}; import sys; "
            f"bad = sorted(m for m in sys.modules if m.startswith({NOT_IN_DAEMONS!r})); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_topology_is_pure_data_and_checks() -> None:
    bad = sorted(f"{m} -> {t}" for m in modules() if m.startswith("stormpy.topology")
                 for t in imports_of(m) if t.startswith(NOT_IN_TOPOLOGY))
    assert not bad, "stormpy/topology/ must not import these:\n" + "\n".join(bad)


def test_every_folder_has_a_layer() -> None:
    layered = set().union(*LAYERS)
    folders = {folder(m) for m in modules()} - {None}
    assert folders - layered == set(), "give these a layer in LAYERS"
    assert layered - folders == set(), "these are gone: take them out of LAYERS"


def test_no_import_goes_up_and_no_folders_import_each_other() -> None:
    edges = folder_edges()
    layer = {name: depth for depth, names in enumerate(LAYERS) for name in names}
    upward = sorted(f"{a} (layer {layer[a]}) -> {b} (layer {layer[b]}): {why[0]}"
                    for (a, b), why in edges.items() if layer[a] > layer[b])
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)
    circles = strongly_connected(set(layer), set(edges))
    assert not circles, "folders that import each other: " + "; ".join(
        ", ".join(sorted(c)) + " (" + ", ".join(w for (a, b), why in edges.items()
                                                if a in c and b in c for w in why[:1]) + ")" for c in circles)


def test_the_package_face_imports_little() -> None:
    face = imports_of("stormpy")
    assert face <= FACE_IMPORTS, f"stormpy/__init__.py imports {sorted(face - FACE_IMPORTS)} at once"
    code = ("import sys, stormpy; from stormpy import Bolt, Topology, WindowedBolt, StatefulBolt, Tuple; "
            "assert Bolt.__module__ == 'stormpy.api.component', Bolt.__module__")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("source, expected", [
    ("import stormpy.task.emit", {"stormpy.task.emit"}),
    ("def f():\n    from stormpy.task import emit", {"stormpy.task.emit"}),
    ("from stormpy.task.emit import make_emit", {"stormpy.task.emit"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import stormpy.task.emit", set()),
    ("from . import emit", {"stormpy.task.emit"}),
    ("from ..api.component import Bolt", {"stormpy.api.component"}),
])
def test_the_reader_sees_every_kind_of_import(source: str, expected: set[str], tmp_path: Path) -> None:
    """The scanner itself: function-level, relative and TYPE_CHECKING imports."""
    module = "stormpy.task._layers_probe"
    modules()[module] = tmp_path / "probe.py"
    (tmp_path / "probe.py").write_text(source)
    try:
        assert set(imports_of.__wrapped__(module)) == expected
    finally:
        del modules()[module]
