"""The one topology pipeline: compile -> validate -> plan, the same on every path.

1. name: :func:`check_name`, the name the user gave;
2. compile: ``stormpy.api.compile.build_topology``, the user's Topology class to the
   ``StormTopology`` Thrift struct (client side: it needs the user's classes);
3. validate: :func:`validate`, the struct with the conf the user wrote;
4. admit (Nimbus only): :func:`admit`, its limits and the conf it stores;
5. plan: :func:`plan`, the struct and the full conf to task ids and executors.

- ``stormpy submit`` (``client/submit.py``) and ``stormpy local`` (``local/runner.py``) call
  ``build_topology``: name, compile, validate. ``stormpy local`` then calls :func:`plan`; the
  client sends the struct and its conf to Nimbus.
- Nimbus (``nimbus/core.py``) never sees a user class: :func:`admit` checks the name, its
  limits and the struct again (a client other than stormpy's may have built it) and gives the
  conf it stores; :func:`plan` then makes the plan it schedules, as the worker does from the
  stored files (``load_plan`` below).

Everything here works on the Thrift struct and config mappings, so the daemons run it without
importing user code or the engine; compiling, which needs the user's classes, is the one stage
in ``stormpy.api``.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.thrift import deserialize, storm
from stormpy.topology.placement import check_host_local_states
from stormpy.topology.plan import TopologyPlan, build_plan
from stormpy.topology.validate import check_topology_limits, parse_json_conf, validate_topology, validate_topology_name

__all__ = ["admit", "check_name", "load_plan", "plan", "validate"]


def check_name(name: str) -> None:
    """A topology name Storm accepts (not empty; none of ``/ . : \\``); checked before compiling."""
    validate_topology_name(name)


def validate(topology: Any, conf: Mapping[str, Any]) -> None:
    """The struct, with the conf the user wrote, can run (``InvalidTopologyException`` naming
    the component, stream or field at fault)."""
    validate_topology(topology, conf)


def admit(name: str, topology: Any, json_conf: str | None, nimbus_conf: Mapping[str, Any],
          normalize: Callable[[str, dict[str, Any]], dict[str, Any]],
          supervisors: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
    """Nimbus's checks at submit; returns the conf stored with the topology.

    In this order: the name; Nimbus's size limits (``nimbus_conf``), before the JSON text is
    parsed into anything lasting; the struct with the user's conf (its errors name bad values
    as the user wrote them); the struct again with the conf ``normalize`` makes (name, worker
    and acker counts fixed at submit); the host-local Trident states against the registered
    ``supervisors``.
    """
    check_name(name)
    check_topology_limits(topology, json_conf, nimbus_conf)
    user_conf = parse_json_conf(json_conf)
    validate(topology, user_conf)
    topology_conf = normalize(name, user_conf)
    validate(topology, topology_conf)
    check_host_local_states(topology, topology_conf, supervisors())
    return topology_conf


def plan(topology: Any, conf: Mapping[str, Any], topology_id: str, name: str,
         component_executors: Mapping[str, int] | None = None) -> TopologyPlan:
    """The runtime view of a validated topology (task ids, executors, subscriptions); Nimbus,
    ``stormpy local`` and workers all build it this way, so they agree on task numbering."""
    return build_plan(topology, conf, topology_id, name, component_executors)


def load_plan(topology_bytes: bytes, conf_json: str, topology_id: str,
              component_executors: Mapping[str, int] | None = None) -> TopologyPlan:
    """:func:`plan` from the files Nimbus stores in stormdist (stormtopology.ser,
    stormconf.json): how a worker builds the plan Nimbus scheduled."""
    topology = deserialize(storm.StormTopology, topology_bytes)
    conf = json.loads(conf_json)
    return plan(topology, conf, topology_id, conf.get(cfg.TOPOLOGY_NAME.name) or topology_id, component_executors)
