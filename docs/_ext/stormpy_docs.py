"""Sphinx extension: the references that are generated from the code, so they cannot drift.

- ``.. stormpy-config-keys::`` lists every key declared in ``stormpy/config.py`` (``KEYS``:
  name, default, type, doc) as a ``confval`` entry; pages link a key with ``{confval}`` (MyST)
  or ``:confval:`` (reST).
- ``.. stormpy-thrift::`` lists every struct, union, exception, enum and service method of
  ``idl/*.thrift`` with its comments and source, as ``thrift`` entries (``{thrift}`Name```).
- ``.. stormpy-rest-api::`` lists every route of the UI (``stormpy.ui.server.UIApp.routes``)
  with the description kept in ``ROUTE_DOCS`` below.

A link to a config key or Thrift name that does not exist is a warning (an error under ``-W``),
and so is a UI route without a description or a description whose route is gone.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

import stormpy

logger = logging.getLogger(__name__)

#: The clone whose code is documented (also when the docs are built from a copy elsewhere).
ROOT = Path(stormpy.__file__).resolve().parents[1]
CHECKED_ROLES = {"confval": "config key", "thrift": "Thrift name"}


def _rst(directive: SphinxDirective, lines: list[str]) -> list[nodes.Node]:
    """Parse generated reStructuredText in place of ``directive`` (sections allowed)."""
    source = directive.get_source_info()[0] or "<generated>"
    content = StringList()
    for number, line in enumerate(lines):
        content.append(line, source, number)
    container = nodes.section() if any(set(l) == {"-"} and len(l) > 2 for l in lines) else nodes.container()
    nested_parse_with_titles(directive.state, content, container)
    return list(container.children)


def _indent(text: str, by: str = "   ") -> list[str]:
    return [by + line if line.strip() else "" for line in text.splitlines()]


# ---------------------------------------------------------------- config keys

def _type_name(type_: Any) -> str:
    if type_ is None:
        return "any"
    types = type_ if isinstance(type_, tuple) else (type_,)
    return " or ".join(t.__name__ for t in types)


def _default_text(value: Any) -> str:
    if value is None:
        return "not set"
    return "``" + json.dumps(value) + "``"


class ConfigKeysDirective(SphinxDirective):
    """Every declared config key, grouped by its namespace (the part before the first dot)."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from stormpy import config

        self.env.note_dependency(str(ROOT / "stormpy" / "config.py"))
        groups: dict[str, list[config.Key]] = {}
        for key in sorted(config.KEYS.values(), key=lambda k: k.name):
            groups.setdefault(key.name.split(".")[0], []).append(key)
        lines: list[str] = []
        for group, keys in groups.items():
            title = f"``{group}.*``"
            lines += [title, "-" * len(title), ""]
            for key in keys:
                lines += [f".. confval:: {key.name}", "",
                          f"   *{_type_name(key.type)}*, default {_default_text(key.default)}", ""]
                lines += _indent(key.doc) + [""]
        return _rst(self, lines)


# ---------------------------------------------------------------- Thrift IDL

@dataclass
class ThriftDef:
    kind: str
    name: str
    comment: list[str]
    source: list[str]
    methods: list["ThriftDef"] = field(default_factory=list)


_DEF = re.compile(r"^(struct|union|exception|enum|service)\s+(\w+)\s*\{")
_METHOD = re.compile(r"^\s+(?:oneway\s+)?[\w<>, .]+?\s+(\w+)\s*\(")
_RULE = re.compile(r"^\s*//\s*-{4,}")


def _comment_text(line: str) -> str:
    return re.sub(r"^\s*(//|/\*+|\*/|\*)\s?", "", line).rstrip().removesuffix("*/").rstrip()


def parse_thrift(text: str) -> list[ThriftDef]:
    """Top-level definitions of a Thrift file with the comment lines just above each one."""
    defs: list[ThriftDef] = []
    comment: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        match = _DEF.match(line)
        if match:
            body = [line]
            while not lines[i].startswith("}"):
                i += 1
                body.append(lines[i])
            item = ThriftDef(match.group(1), match.group(2), comment, body)
            if item.kind == "service":
                item.methods = _parse_methods(body[1:-1], item.name)
            defs.append(item)
            comment = []
        elif _RULE.match(line) or not line.strip():
            comment = []
        elif line.lstrip().startswith(("//", "/*", "*")):
            comment.append(_comment_text(line))
        else:
            comment = []
        i += 1
    return defs


def _parse_methods(body: list[str], service: str) -> list[ThriftDef]:
    methods: list[ThriftDef] = []
    comment: list[str] = []
    current: ThriftDef | None = None
    for line in body:
        if current is not None:
            current.source.append(line)
            if line.rstrip().endswith(";"):
                current = None
            continue
        match = _METHOD.match(line)
        if match and not line.lstrip().startswith("//"):
            current = ThriftDef("method", f"{service}.{match.group(1)}", comment, [line])
            methods.append(current)
            comment = []
            if line.rstrip().endswith(";"):
                current = None
        elif line.lstrip().startswith("//"):
            comment.append(_comment_text(line))
        else:
            comment = []
    return methods


def _dedent(lines: list[str]) -> list[str]:
    width = min((len(l) - len(l.lstrip()) for l in lines if l.strip()), default=0)
    return [l[width:] for l in lines]


def _thrift_entry(item: ThriftDef) -> list[str]:
    lines = [f".. thrift:: {item.name}", ""]
    if item.kind != "method":
        lines += [f"   *{item.kind}*", ""]
    if item.comment:
        lines += ["   | " + (c or " ") for c in item.comment if c is not None] + [""]
    lines += ["   .. code-block:: thrift", ""] + ["      " + l for l in _dedent(item.source)] + [""]
    return lines


class ThriftDirective(SphinxDirective):
    """Every definition of ``idl/<argument>`` (default storm.thrift), services method by method."""

    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        path = ROOT / "idl" / (self.arguments[0] if self.arguments else "storm.thrift")
        self.env.note_dependency(str(path))
        defs = parse_thrift(path.read_text())
        self._check_complete(defs)
        lines: list[str] = []
        for heading, kinds in (("Service", ("service",)), ("Structs and unions", ("struct", "union")),
                               ("Exceptions", ("exception",)), ("Enums", ("enum",))):
            items = [d for d in defs if d.kind in kinds]
            if not items:
                continue
            lines += [heading, "-" * len(heading), ""]
            for item in items:
                if item.kind == "service":
                    lines += [f".. thrift:: {item.name}", "", "   *service*", ""]
                    lines += ["   | " + c for c in item.comment] + [""] if item.comment else []
                    for method in item.methods:
                        lines += _thrift_entry(method)
                else:
                    lines += _thrift_entry(item)
        return _rst(self, lines)

    def _check_complete(self, defs: list[ThriftDef]) -> None:
        """Warn about any name thriftpy2 loads that this parser missed (the page would lie)."""
        from stormpy.thrift import storm

        documented = {d.name for d in defs} | {m.name.split(".")[1] for d in defs for m in d.methods}
        loaded = {name for name, value in vars(storm).items()
                  if isinstance(value, type) and getattr(value, "__module__", "") == "storm_thrift"
                  and hasattr(value, "thrift_spec")}
        service = getattr(storm, "Nimbus", None)
        methods = set(getattr(service, "thrift_services", ()))
        for name in sorted((loaded | methods) - documented):
            logger.warning("idl: %s is in the IDL but not in the generated reference", name,
                           location=self.get_location())


# ---------------------------------------------------------------- UI REST API

#: What each UI route does, by "METHOD path" as the route table spells it (see _route_key).
ROUTE_DOCS: dict[str, str] = {
    "GET /api/v1/cluster/summary": "Cluster totals: supervisors, slots (used, free, total), executors, "
                                   "tasks, topologies, stormpy's version.",
    "GET /api/v1/cluster/configuration": "Nimbus's configuration (``getNimbusConf``), credentials shown as "
                                         "``****``; needs a login when UI login is on.",
    "GET /api/v1/supervisor/summary": "One entry per live supervisor: id, host, uptime, slots (total, "
                                      "used, free), version.",
    "GET /api/v1/nimbus/summary": "Every registered Nimbus, which one leads, its version and uptime.",
    "GET /api/v1/topology/summary": "Every topology: name, id, status, uptime, workers, executors, tasks.",
    "GET /api/v1/topology/{id}": "One topology: spouts and bolts with their stats for ``?window=`` "
                                 "(600, 10800, 86400 or ``:all-time``; ``&sys=1`` adds system components), "
                                 "workers, last errors, its configuration and the ``antiForgeryToken`` "
                                 "the POST routes need.",
    "GET /api/v1/topology/{id}/component/{component}": "One component: per-executor stats for ``?window=``, "
                                                       "inputs and outputs, errors and executor metrics.",
    "GET /api/v1/topology/{id}/visualization": "The topology graph in Storm's shape (component -> "
                                               "``:type``, ``:capacity``, ``:latency``, ``:inputs``, ...), "
                                               "plus backpressure per component.",
    "GET /api/v1/topology/{id}/timeseries": "The last hour of the topology's rates: ``time``, ``emitted``, "
                                            "``acked``, ``failed`` (tuples/s) and ``latency`` (ms).",
    "GET /api/v1/topology/{id}/component/{component}/timeseries": "The same last-hour series for one component.",
    "POST /api/v1/topology/{id}/activate": "Activate the topology's spouts (needs ``X-CSRF-Token``).",
    "POST /api/v1/topology/{id}/deactivate": "Deactivate the topology's spouts (needs ``X-CSRF-Token``).",
    "POST /api/v1/topology/{id}/rebalance/{wait}": "Rebalance after ``wait`` seconds; optional JSON body "
                                                   "``{\"rebalanceOptions\": {\"numWorkers\": 2, "
                                                   "\"executors\": {\"split\": 4}}}``.",
    "POST /api/v1/topology/{id}/kill/{wait}": "Deactivate, wait ``wait`` seconds, remove the topology.",
    "GET /": "The cluster page (also ``/index.html``): cluster, Nimbus, topology and supervisor summaries.",
    "GET /topology.html": "A topology's page (``?id=``): components, stats, workers, errors, config, "
                          "action buttons, last-hour charts.",
    "GET /component.html": "A component's page (``?topology_id=&id=``).",
    "GET /topology_graph.html": "The topology graph (``?id=``), redrawn every 3 s from the visualization API.",
    "GET /metrics": "Prometheus text format, computed from Nimbus at each scrape (see :doc:`/how-to/prometheus`).",
    "GET /favicon.ico": "The icon.",
    "GET /static/{name}": "The pages' scripts and styles.",
}


def _route_key(method: str, pattern: str) -> str:
    path = pattern.removesuffix("/?")
    path = path.replace(r"(?:index\.html)?", "")
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", path)
    path = path.replace("\\", "")
    return f"{method} {path or '/'}"


class RestApiDirective(SphinxDirective):
    """Every UI route (method, path, description) from the UI's own route table."""

    def run(self) -> list[nodes.Node]:
        from stormpy.config import Config
        from stormpy.ui.server import UIApp

        self.env.note_dependency(str(ROOT / "stormpy" / "ui" / "server.py"))
        routes = [(r.method, r.pattern.pattern, r.kind) for r in UIApp(Config()).routes]
        keys = [_route_key(m, p) for m, p, _ in routes]
        for key in keys:
            if key not in ROUTE_DOCS:
                logger.warning("UI route %r has no description in ROUTE_DOCS (docs/_ext/stormpy_docs.py)", key,
                               location=self.get_location())
        for key in sorted(set(ROUTE_DOCS) - set(keys)):
            logger.warning("ROUTE_DOCS describes %r, which the UI no longer serves", key,
                           location=self.get_location())
        lines: list[str] = []
        for title, kind in (("JSON API", "api"), ("Pages", "page")):
            lines += [title, "-" * len(title), ""]
            for (_method, _pattern, route_kind), key in zip(routes, keys):
                if route_kind == kind:
                    lines += [f"``{key}``", f"   {ROUTE_DOCS.get(key, '')}", ""]
        return _rst(self, lines)


# ---------------------------------------------------------------- dangling links

def _warn_missing(app: Sphinx, env: Any, node: nodes.Element, contnode: nodes.Node) -> None:
    kind = CHECKED_ROLES.get(node.get("reftype", ""))
    if kind:
        logger.warning("%s %r does not exist (renamed or removed?)", kind, node.get("reftarget"),
                       location=node)
    return None


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_object_type("confval", "confval", objname="configuration key",
                        indextemplate="pair: %s; configuration key")
    app.add_object_type("thrift", "thrift", objname="Thrift definition",
                        indextemplate="pair: %s; Thrift")
    app.add_directive("stormpy-config-keys", ConfigKeysDirective)
    app.add_directive("stormpy-thrift", ThriftDirective)
    app.add_directive("stormpy-rest-api", RestApiDirective)
    app.connect("missing-reference", _warn_missing)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
