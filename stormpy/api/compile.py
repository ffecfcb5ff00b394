"""Compiles a Topology class into the ``StormTopology`` Thrift struct (DESIGN section 3).

User classes are referenced by ``module:QualName`` so Nimbus never imports them; workers
import them from the topology's code. A component declared by instance also travels as
``cloudpickle`` bytes in ``PythonObject.serialized`` (the class name stays filled, for display
and validation); only executors unpickle it, never Nimbus. Classes compiled in this process are also remembered,
so ``stormpy local`` and tests can run components defined where no import path reaches them.
"""
from __future__ import annotations

import importlib
import json

import cloudpickle
from collections.abc import Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.api.component import read_only_assignments
from stormpy.api.dsl import ComponentSpec, Grouping, Topology, normalize_outputs, resolve_par
from stormpy.streams import CHECKPOINT_COMPONENT, CHECKPOINT_SPOUT_CLASS, CHECKPOINT_STREAM
from stormpy.thrift import storm
from stormpy.topology import pipeline

_CLASSES: dict[str, type] = {}


def invalid(msg: str) -> Exception:
    return storm.InvalidTopologyException(msg=msg)


def class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_class(name: str) -> type:
    """The class behind ``module:QualName``: one compiled in this process, else imported."""
    cls = _CLASSES.get(name)
    if cls is not None:
        return cls
    module_name, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def component_kind(cls: type) -> str:
    """'spout' or 'bolt', by the API the class implements (Spout has next_tuple, Bolt process)."""
    if callable(getattr(cls, "next_tuple", None)):
        return "spout"
    if callable(getattr(cls, "process", None)) or callable(getattr(cls, "process_batch", None)):
        return "bolt"
    raise invalid(f"component class {cls.__qualname__} is neither a Spout nor a Bolt")


def _common(spec: ComponentSpec, ids: dict[int, str], environment: str | None = None, strict: bool = True) -> Any:
    if spec.shell is None and spec.java is None:
        clashes = read_only_assignments(spec.component_cls)
        if clashes:
            raise invalid(f"component {spec.name!r}: {clashes[0]}")
    try:
        streams = normalize_outputs(spec.outputs)
    except (TypeError, ValueError) as exc:
        raise invalid(f"component {spec.name!r}: {exc}") from None
    inputs = {}
    try:
        groupings = spec.input_groupings()
    except TypeError as exc:
        raise invalid(str(exc)) from None
    names = set(ids.values())
    for source, stream, grouping in groupings:
        source_id = source if isinstance(source, str) and source in names else ids.get(id(source))
        if source_id is None:
            raise invalid(f"component {spec.name!r} has an input {getattr(source, 'name', None) or source!r} "
                          "that is not a component of this topology")
        if grouping.kind == "jvm":
            raise invalid(f"component {spec.name!r}: {grouping.obj} needs a JVM to choose tasks; stormpy workers "
                          "run Python only (use Grouping.custom(obj) with a Python object)")
        try:
            thrift_grouping = grouping.to_thrift()
        except Exception as exc:  # pickling a custom grouping object
            raise invalid(f"component {spec.name!r}: custom grouping {grouping.obj!r} cannot be pickled: {exc}") from None
        inputs[storm.GlobalStreamId(componentId=source_id, streamId=stream)] = thrift_grouping
    try:
        json_conf = json.dumps({**_component_configuration(spec), **spec.config})
    except (TypeError, ValueError) as exc:
        raise invalid(f"component {spec.name!r}: config is not JSON-serializable: {exc}") from None
    return storm.ComponentCommon(
        inputs=inputs,
        streams={sid: storm.StreamInfo(output_fields=list(s.fields), direct=s.direct) for sid, s in streams.items()},
        parallelism_hint=_par(spec, environment) if strict or environment is not None
        or not isinstance(spec.par, Mapping) else dict(spec.par),
        json_conf=json_conf,
    )


def _component_configuration(spec: ComponentSpec) -> dict[str, Any]:
    """Storm's ``getComponentConfiguration``: config the component declares itself (windows)."""
    hook = getattr(spec.instance if spec.instance is not None else spec.component_cls, "get_component_configuration", None)
    return dict(hook() or {}) if callable(hook) else {}


def _par(spec: ComponentSpec, environment: str | None) -> int:
    try:
        return resolve_par(spec.name or "?", spec.par, environment)
    except ValueError as exc:
        raise invalid(str(exc)) from None


def _component_object(spec: ComponentSpec, strict: bool = True) -> Any:
    """A ShellComponent for ShellBolt/ShellSpout specs, else the PythonObject naming the class;
    a JVM component is refused, or (``strict=False``) shown as its JavaObject / serialized bytes."""
    if spec.java is not None and not strict:
        if isinstance(spec.java_object, bytes):
            return storm.ComponentObject(serialized_java=spec.java_object)
        return storm.ComponentObject(java_object=spec.java_object)
    if spec.java is not None:
        raise invalid(f"component {spec.name!r} is a {spec.java}: JVM components cannot run in a stormpy "
                      "worker (stormpy runs Python classes and multilang ShellBolt/ShellSpout commands)")
    if spec.shell is not None:
        command, script = spec.shell
        return storm.ComponentObject(shell=storm.ShellComponent(execution_command=command, script=script))
    name = class_name(spec.component_cls)
    _CLASSES[name] = spec.component_cls
    return storm.ComponentObject(python_object=storm.PythonObject(class_name=name, serialized=_serialized(spec)))


def _serialized(spec: ComponentSpec) -> bytes | None:
    """The spec's instance as cloudpickle bytes, or None for a component declared by class."""
    if spec.instance is None:
        return None
    try:
        return cloudpickle.dumps(spec.instance)
    except Exception as exc:
        raise invalid(f"component {spec.name!r}: instance {spec.instance!r} cannot be pickled: {exc}") from None


def compile_topology(topology_cls: type[Topology], conf: Mapping[str, Any] | None = None,
                     environment: str | None = None, strict: bool = True) -> Any:
    """Build the StormTopology struct; raises InvalidTopologyException for malformed specs.

    ``environment`` picks the entry of streamparse-style ``par={"prod": 5, "beta": 1}`` dicts.
    ``strict=False`` builds what streamparse's ``Topology.thrift_topology`` shows instead of
    refusing what stormpy cannot run: a dict ``par`` stays a dict, JavaBolt/JavaSpout specs
    become their JavaObject or serialized bytes (local start and submit stay strict).
    """
    compiler = getattr(topology_cls, "compile_storm_topology", None)
    if compiler is not None:  # a TridentTopology builds its own graph of framework components
        return compiler(dict(conf or {}))
    specs = list(getattr(topology_cls, "specs", []))
    ids: dict[int, str] = {}
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise invalid(f"duplicate component id {spec.name!r}")
        seen.add(spec.name)
        ids[id(spec)] = spec.name
    spouts: dict[str, Any] = {}
    bolts: dict[str, Any] = {}
    for spec in specs:
        obj = _component_object(spec, strict)
        common = _common(spec, ids, environment, strict)
        if (spec.kind or component_kind(spec.component_cls)) == "spout":
            spouts[spec.name] = storm.SpoutSpec(spout_object=obj, common=common)
        else:
            bolts[spec.name] = storm.Bolt(bolt_object=obj, common=common)
    stateful = [spec.name for spec in specs if spec.name in bolts and getattr(spec.component_cls, "is_stateful", False)]
    if stateful:
        add_checkpointing(spouts, bolts, stateful, conf)
    return storm.StormTopology(spouts=spouts, bolts=bolts, state_spouts={})


def build_topology(topology_cls: type[Topology], name: str, conf: Mapping[str, Any],
                   environment: str | None = None, user_conf: Mapping[str, Any] | None = None) -> Any:
    """The client's half of the topology pipeline (``stormpy.topology.pipeline``): check the
    name, compile with ``conf``, validate the struct with the conf the user wrote
    (``user_conf``, ``conf`` itself when not given). ``stormpy submit`` and ``stormpy local``
    both call it; raises InvalidTopologyException."""
    pipeline.check_name(name)
    topology = compile_topology(topology_cls, conf, environment=environment)
    pipeline.validate(topology, conf if user_conf is None else user_conf)
    return topology


def add_checkpointing(spouts: dict[str, Any], bolts: dict[str, Any], stateful: list[str],
                      conf: Mapping[str, Any] | None) -> None:
    """Compile-time wiring of stateful bolts (``stormpy.stateful.checkpoint``): the checkpoint
    spout, named by its class, and every stateful bolt subscribed to it."""
    if not stateful:
        return
    ackers = (conf or {}).get(cfg.TOPOLOGY_ACKER_EXECUTORS.name)
    if ackers is not None and int(ackers) == 0:
        raise storm.InvalidTopologyException(
            msg=f"stateful bolts ({', '.join(stateful)}) need acking: topology.acker.executors must not be 0")
    spouts[CHECKPOINT_COMPONENT] = storm.SpoutSpec(
        spout_object=storm.ComponentObject(python_object=storm.PythonObject(class_name=CHECKPOINT_SPOUT_CLASS)),
        common=storm.ComponentCommon(
            inputs={},
            streams={CHECKPOINT_STREAM: storm.StreamInfo(output_fields=["txid", "action"], direct=False)},
            parallelism_hint=1, json_conf="{}"))
    for name in stateful:
        bolts[name].common.inputs[storm.GlobalStreamId(componentId=CHECKPOINT_COMPONENT,
                                                       streamId=CHECKPOINT_STREAM)] = Grouping.ALL.to_thrift()


def topology_config(topology_cls: type[Topology]) -> dict[str, Any]:
    """The topology class's own ``config`` (a copy)."""
    conf = getattr(topology_cls, "config", None) or {}
    if not isinstance(conf, Mapping):
        raise invalid(f"{topology_cls.__name__}.config must be a dict, got {type(conf).__name__}")
    return dict(conf)
