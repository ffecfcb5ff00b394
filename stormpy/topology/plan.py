"""The runtime view of a topology: task ids, executors, streams and who subscribes to what.

Built from the Thrift struct and the topology config by Nimbus (to schedule), by workers
and by ``stormpy local`` (to route), so all of them agree on task numbering: ids start at 1
and are handed out over components sorted by id, Storm's rule. The system bolt ``__acker``
is added here when ``topology.acker.executors`` is not 0.
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stormpy import config as cfg
from stormpy.streams import (ACK_ACK, ACK_FAIL, ACKER_CLASS, ACKER_COMPONENT, SHELL_BOLT_CLASS, SHELL_SPOUT_CLASS,
                             is_framework_id, is_system_id)
from stormpy.topology.validate import components, parse_json_conf

__all__ = ["ACKER_COMPONENT", "ComponentPlan", "ExecutorRange", "StreamDef", "TopologyPlan", "build_plan",
           "split_tasks", "acker_count"]

#: One executor: its (task_start, task_end), both inclusive (Storm's ExecutorInfo).
ExecutorRange = tuple[int, int]


@dataclass(frozen=True)
class StreamDef:
    """One output stream a component declared (Storm's ``StreamInfo``).

    ``fields`` names the values of every tuple on the stream, in order: a fields grouping
    hashes by them and ``tup.values`` is a namedtuple of them, so an emit must carry exactly
    this many values. ``direct`` streams are sent only with ``emit(..., direct_task=t)`` to
    subscribers using direct grouping (validation refuses direct grouping on other streams).
    Frozen: shared by every executor of the plan.
    """

    fields: tuple[str, ...]
    direct: bool = False


@dataclass
class ComponentPlan:
    """One component as every task of it runs: its code, its task ids, streams and inputs.

    Names and data only (no component object): Nimbus builds plans on every monitor round and
    must not import user code; a worker imports ``class_name`` and makes each task's instance
    from ``serialized`` (a pickled instance) or by calling the class with ``init_args``.
    Invariants once :func:`build_plan` returns: ``tasks`` is a run of consecutive ids, disjoint
    from every other component's; ``1 <= parallelism <= len(tasks)`` (the executors that share
    them, :func:`split_tasks`); ``conf`` is the topology conf with this component's own config
    on top.
    """

    id: str
    kind: str                      # "spout" | "bolt"
    class_name: str                # "module:Class"
    tasks: list[int]
    streams: dict[str, StreamDef]
    inputs: dict[tuple[str, str], Any]   # (component, stream) -> storm.Grouping
    conf: cfg.Config               # topology conf <- component conf, coerced by the declared Keys
    parallelism: int               # executors
    serialized: bytes | None = None  # a pickled component instance (PythonObject.serialized)
    #: Arguments the worker calls ``class_name`` with when nothing is serialized (a shell
    #: component's runner gets ``(command, script)``; a user class none).
    init_args: tuple[str, ...] = ()
    #: Storm's system components (``__acker``): left out of user-facing counts.
    is_system: bool = False
    #: Made by the framework (system, or Trident's ``$`` components): hidden by the UI unless asked.
    is_framework: bool = False


@dataclass
class TopologyPlan:
    """The runtime view of one topology, the same wherever it is built (see the module doc).

    ``task_component`` maps every task id (1..N, no gaps) to its component; ``acker_tasks``
    are the ``__acker`` bolt's tasks (empty when acking is off); ``subscribers(c, s)`` lists,
    sorted by component id, who receives stream ``s`` of ``c`` and by which ``storm.Grouping``.
    Built once and then only read (executors of one worker share it across threads).
    """

    topology_id: str
    name: str
    conf: cfg.Config
    components: dict[str, ComponentPlan]
    task_component: dict[int, str] = field(default_factory=dict)
    acker_tasks: list[int] = field(default_factory=list)
    _subscribers: dict[tuple[str, str], list[tuple[str, Any]]] = field(default_factory=dict)

    def subscribers(self, component_id: str, stream_id: str) -> list[tuple[str, Any]]:
        """(target component, storm.Grouping) for every subscription to this stream."""
        return self._subscribers.get((component_id, stream_id), [])

    def executors(self) -> list[ExecutorRange]:
        """(task_start, task_end) of every executor, components in id order."""
        result: list[ExecutorRange] = []
        for cid in sorted(self.components):
            comp = self.components[cid]
            result.extend(split_tasks(comp.tasks, comp.parallelism))
        return result

    def component_executors(self, component_id: str) -> list[ExecutorRange]:
        comp = self.components[component_id]
        return split_tasks(comp.tasks, comp.parallelism)

    def spout_tasks(self) -> list[int]:
        return [t for c in self.components.values() if c.kind == "spout" for t in c.tasks]


def split_tasks(tasks: list[int], parallelism: int) -> list[ExecutorRange]:
    """Spread a component's tasks over ``parallelism`` executors as contiguous ranges."""
    if not tasks:
        return []
    count = max(1, min(parallelism, len(tasks)))
    base, extra = divmod(len(tasks), count)
    ranges, start = [], 0
    for i in range(count):
        size = base + (1 if i < extra else 0)
        chunk = tasks[start:start + size]
        ranges.append((chunk[0], chunk[-1]))
        start += size
    return ranges


def acker_count(conf: Mapping[str, Any]) -> int:
    ackers = conf.get(cfg.TOPOLOGY_ACKER_EXECUTORS.name)
    if ackers is None:
        return max(1, int(cfg.read(conf, cfg.TOPOLOGY_WORKERS)))   # one per worker, at least one
    return int(ackers)


def component_code(obj: Any, kind: str) -> tuple[str, bytes | None, tuple[str, ...]]:
    """(class name, pickled instance or None, init args) that run a ComponentObject: a
    PythonObject as compiled; a ShellComponent natively (``streamparse_run pkg.mod.Class``)
    or by the multilang runner class, called with ``(command, script)``.

    Names and plain strings only: building a plan imports no component code, so Nimbus can
    build one on every monitor round; the worker imports the class and makes the instance.
    """
    if obj.python_object is not None:
        return obj.python_object.class_name, obj.python_object.serialized or None, ()
    shell = obj.shell
    command = shell.execution_command or ""
    words = shlex.split(shell.script or "")
    if os.path.basename(command.split()[-1] if command.split() else "") == "streamparse_run" and words:
        dotted = [w for w in words if not w.startswith("-")][-1]
        module, _, cls = dotted.rpartition(".")
        return f"{module}:{cls}", None, ()
    return (SHELL_SPOUT_CLASS if kind == "spout" else SHELL_BOLT_CLASS), None, (command, shell.script or "")


def build_plan(topology: Any, conf: Mapping[str, Any], topology_id: str, name: str,
               component_executors: Mapping[str, int] | None = None) -> TopologyPlan:
    """The TopologyPlan of a (validated) topology; ``component_executors`` overrides parallelism."""
    full_conf = conf if isinstance(conf, cfg.Config) else cfg.Config(conf)
    overrides = dict(component_executors or {})
    plans: dict[str, ComponentPlan] = {}
    for cid, (kind, spec) in components(topology).items():
        common = spec.common
        comp_conf = parse_json_conf(common.json_conf, f"config of component {cid!r}")
        obj = spec.spout_object if kind == "spout" else spec.bolt_object
        par = int(common.parallelism_hint or 1)
        num_tasks = int(comp_conf.get(cfg.TOPOLOGY_TASKS.name) or par)
        class_name, serialized, init_args = component_code(obj, kind)
        plans[cid] = ComponentPlan(
            id=cid, kind=kind, class_name=class_name, tasks=[],
            streams={sid: StreamDef(tuple(s.output_fields), bool(s.direct)) for sid, s in (common.streams or {}).items()},
            inputs={(g.componentId, g.streamId): grouping for g, grouping in (common.inputs or {}).items()},
            conf=full_conf.merged(comp_conf) if comp_conf else full_conf,
            parallelism=min(overrides.get(cid, par), num_tasks),
            serialized=serialized, init_args=init_args,
            is_system=is_system_id(cid), is_framework=is_framework_id(cid),
        )
        plans[cid].tasks = [0] * num_tasks  # numbered below
    ackers = acker_count(full_conf)
    if ackers > 0:
        plans[ACKER_COMPONENT] = ComponentPlan(
            id=ACKER_COMPONENT, kind="bolt", class_name=ACKER_CLASS, tasks=[0] * ackers,
            streams={ACK_ACK: StreamDef(("id", "value"), True), ACK_FAIL: StreamDef(("id",), True)},
            inputs={}, conf=full_conf, parallelism=min(overrides.get(ACKER_COMPONENT, ackers), ackers),
            is_system=True, is_framework=True,
        )
    plan = TopologyPlan(topology_id=topology_id, name=name, conf=full_conf, components=plans)
    next_task = 1
    for cid in sorted(plans):
        comp = plans[cid]
        comp.tasks = list(range(next_task, next_task + len(comp.tasks)))
        next_task += len(comp.tasks)
        for task in comp.tasks:
            plan.task_component[task] = cid
    if ACKER_COMPONENT in plans:
        plan.acker_tasks = list(plans[ACKER_COMPONENT].tasks)
    for cid, comp in plans.items():
        for (source, stream), grouping in comp.inputs.items():
            plan._subscribers.setdefault((source, stream), []).append((cid, grouping))
    for subs in plan._subscribers.values():
        subs.sort(key=lambda item: item[0])
    return plan
