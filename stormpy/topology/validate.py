"""Validation of a compiled topology: the one function both the CLI and Nimbus call.

Works on the Thrift struct and a config mapping only (Nimbus never imports user code), and
raises ``InvalidTopologyException`` whose message names the component, stream or field at
fault (DESIGN section 5).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.config import ConfigError
from stormpy.streams import is_system_id
from stormpy.thrift import storm
from stormpy.topology.windows import check_window_conf

# Storm's Utils.DISALLOWED_TOPOLOGY_NAME_STRS; '/' would also break ZooKeeper paths.
DISALLOWED_NAME_CHARS = ("/", ".", ":", "\\")


def invalid(msg: str) -> Exception:
    return storm.InvalidTopologyException(msg=msg)


def validate_topology_name(name: str) -> None:
    if not name or not name.strip():
        raise invalid("topology name must not be empty")
    for char in DISALLOWED_NAME_CHARS:
        if char in name:
            raise invalid(f"topology name {name!r} must not contain {char!r}")


def parse_json_conf(text: str | None, what: str = "topology config") -> dict[str, Any]:
    """Parse a JSON config string; anything but a JSON object is invalid."""
    if text is None or text == "":
        return {}
    try:
        value = json.loads(text)
    except RecursionError:
        raise invalid(f"{what} is nested too deeply") from None
    except (TypeError, ValueError) as exc:
        raise invalid(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise invalid(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in item)
    return deepest


def check_conf_limits(text: str | None, what: str, max_bytes: int, max_depth: int) -> None:
    """A conf above ``nimbus.topology.conf.max.bytes`` or nested deeper than
    ``nimbus.topology.conf.max.depth`` is refused before it is parsed into anything lasting
    (it would be copied to every worker and re-read on every heartbeat)."""
    if not text:
        return
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise invalid(f"{what} is {size} bytes; the limit is {max_bytes} (nimbus.topology.conf.max.bytes)")
    depth = json_depth(parse_json_conf(text, what))
    if depth > max_depth:
        raise invalid(f"{what} is nested {depth} levels deep; the limit is {max_depth} "
                      "(nimbus.topology.conf.max.depth)")


def check_topology_limits(topology: Any, json_conf: str | None, conf: Mapping[str, Any]) -> None:
    """Nimbus's size limits, checked before anything is written (issue 10, items 5 and 7).

    ``conf`` is Nimbus's config: ``nimbus.executors.perTopology`` caps executors (tasks at ten
    times that: a task costs a worker memory and a ZooKeeper heartbeat entry),
    ``nimbus.slots.perTopology`` workers, and the conf keys size and depth of the topology's
    and each component's JSON config. Without them a huge topology held Nimbus's lock while
    ZooKeeper refused its assignment (jute.maxbuffer).
    """
    max_bytes = int(cfg.read(conf, cfg.NIMBUS_TOPOLOGY_CONF_MAX_BYTES))
    max_depth = int(cfg.read(conf, cfg.NIMBUS_TOPOLOGY_CONF_MAX_DEPTH))
    max_executors = int(cfg.read(conf, cfg.NIMBUS_EXECUTORS_PER_TOPOLOGY))
    max_slots = int(cfg.read(conf, cfg.NIMBUS_SLOTS_PER_TOPOLOGY))
    check_conf_limits(json_conf, "topology config", max_bytes, max_depth)
    if topology is None:
        return
    executors = tasks = 0
    for cid, (_kind, spec) in components(topology).items():
        common = spec.common
        if common is None:
            continue
        check_conf_limits(common.json_conf, f"config of component {cid!r}", max_bytes, max_depth)
        par = common.parallelism_hint or 1
        comp_tasks = parse_json_conf(common.json_conf, f"config of component {cid!r}").get(cfg.TOPOLOGY_TASKS.name)
        executors += max(1, int(par)) if isinstance(par, int) else 1
        tasks += comp_tasks if isinstance(comp_tasks, int) and comp_tasks > 0 else max(1, int(par or 1))
    if executors > max_executors:
        raise invalid(f"topology has {executors} executors; the limit is {max_executors} "
                      "(nimbus.executors.perTopology)")
    if tasks > 10 * max_executors:
        raise invalid(f"topology has {tasks} tasks; the limit is {10 * max_executors} "
                      "(10 x nimbus.executors.perTopology)")
    user_conf = parse_json_conf(json_conf)
    workers = user_conf.get(cfg.TOPOLOGY_WORKERS.name)
    if isinstance(workers, int) and workers > max_slots:
        raise invalid(f"topology asks for {workers} workers; the limit is {max_slots} (nimbus.slots.perTopology)")
    ackers = user_conf.get(cfg.TOPOLOGY_ACKER_EXECUTORS.name)
    if isinstance(ackers, int) and executors + ackers > max_executors:
        raise invalid(f"topology has {executors} executors and {ackers} ackers; the limit is {max_executors} "
                      "(nimbus.executors.perTopology)")


def components(topology: Any) -> dict[str, tuple[str, Any]]:
    """component id -> ('spout'|'bolt', spec) of a StormTopology."""
    result: dict[str, tuple[str, Any]] = {}
    for cid, spec in (topology.spouts or {}).items():
        result[cid] = ("spout", spec)
    for cid, spec in (topology.bolts or {}).items():
        if cid in result:
            raise invalid(f"duplicate component id {cid!r} (used by a spout and a bolt)")
        result[cid] = ("bolt", spec)
    return result


def component_object(kind: str, spec: Any) -> Any:
    return spec.spout_object if kind == "spout" else spec.bolt_object


def _check_component(cid: str, kind: str, spec: Any) -> None:
    if not cid:
        raise invalid("component id must not be empty")
    if is_system_id(cid):
        raise invalid(f"component id {cid!r} is reserved: ids starting with '__' belong to the system")
    if "/" in cid:
        raise invalid(f"component id {cid!r} must not contain '/'")
    obj = component_object(kind, spec)
    if obj is not None and obj.serialized_java is not None:
        raise invalid(f"component {cid!r} is a serialized Java object: JVM components cannot run in a "
                      "stormpy worker")
    if obj is not None and getattr(obj, "java_object", None) is not None:
        raise invalid(f"component {cid!r} is a JavaObject ({obj.java_object.full_class_name}): JVM components "
                      "cannot run in a stormpy worker")
    shell = getattr(obj, "shell", None) if obj is not None else None
    py = getattr(obj, "python_object", None) if obj is not None else None
    if shell is not None:
        if not shell.execution_command:
            raise invalid(f"component {cid!r} is a ShellComponent without execution_command")
    elif py is not None and py.class_name and ":" not in py.class_name and py.serialized is None:
        # Storm's ComponentObject field 3 is a JavaObject (full_class_name first), stormpy's is
        # PythonObject: a JavaBolt/JavaSpout sent by a Storm client (streamparse's `sparse
        # submit`) arrives here as a PythonObject holding the Java class name.
        raise invalid(f"component {cid!r} names {py.class_name!r}, not a Python 'module:Class': a JVM "
                      "component (Storm's JavaObject, streamparse's JavaBolt/JavaSpout) cannot run in a "
                      "stormpy worker")
    elif py is None or ":" not in (py.class_name or ""):
        raise invalid(f"component {cid!r} must name its Python class as 'module:Class'")
    common = spec.common
    if common is None:
        raise invalid(f"component {cid!r} has no common part")
    par = common.parallelism_hint
    if par is None or par < 1:
        raise invalid(f"component {cid!r} has parallelism {par}; it must be at least 1")
    comp_conf = parse_json_conf(common.json_conf, f"config of component {cid!r}")
    tasks = comp_conf.get(cfg.TOPOLOGY_TASKS.name)
    if tasks is not None and (not isinstance(tasks, int) or tasks < 1):
        raise invalid(f"component {cid!r} has topology.tasks {tasks!r}; it must be a positive integer")
    if kind == "spout" and common.inputs:
        raise invalid(f"spout {cid!r} must not have inputs")


def _grouping_fields(grouping: Any) -> tuple[str, list[str]] | None:
    if grouping.fields is not None:
        return "fields", list(grouping.fields)
    if grouping.partial_key is not None:
        return "partial_key", list(grouping.partial_key)
    return None


def _check_inputs(cid: str, common: Any, comps: dict[str, tuple[str, Any]]) -> None:
    for stream_id, grouping in (common.inputs or {}).items():
        source = stream_id.componentId
        if source not in comps:
            raise invalid(f"component {cid!r} subscribes to unknown component {source!r}")
        streams = comps[source][1].common.streams or {}
        stream = streams.get(stream_id.streamId)
        if stream is None:
            declared = ", ".join(sorted(streams)) or "none"
            raise invalid(f"component {cid!r} subscribes to stream {stream_id.streamId!r} of {source!r}, "
                          f"which declares no such stream (declared: {declared})")
        named = _grouping_fields(grouping)
        if named:
            kind, fields = named
            if kind == "partial_key" and not fields:
                raise invalid(f"component {cid!r}: partial_key grouping on {source!r} needs at least one field")
            for field in fields:
                if field not in stream.output_fields:
                    raise invalid(f"component {cid!r} groups stream {stream_id.streamId!r} of {source!r} by "
                                  f"field {field!r}, which that stream does not declare "
                                  f"(fields: {', '.join(stream.output_fields) or 'none'})")
        if grouping.direct is not None and not stream.direct:
            raise invalid(f"component {cid!r} uses direct grouping on stream {stream_id.streamId!r} of "
                          f"{source!r}, which is not declared direct (Stream(..., direct=True))")


def _check_conf(conf: Mapping[str, Any], comps: dict[str, tuple[str, Any]]) -> None:
    try:
        json.dumps(dict(conf))
    except (TypeError, ValueError) as exc:
        raise invalid(f"topology config is not JSON-serializable: {exc}") from None
    for name, value in conf.items():
        key = cfg.KEYS.get(name)
        if key is not None:
            try:
                key.coerce(value)
            except ConfigError as exc:
                raise invalid(str(exc)) from None
    timeout = cfg.read(conf, cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS)
    # Only where a user set the key: a conf with defaults filled in carries the Spark default
    # for every component, and most components are not Spark sinks.
    default_secs = cfg.SPARK_SINK_BATCH_SECS.default
    topology_secs = conf.get(cfg.SPARK_SINK_BATCH_SECS.name)
    if topology_secs == default_secs:
        topology_secs = None
    for cid, (_kind, spec) in comps.items():
        comp_conf = parse_json_conf(spec.common.json_conf, f"config of component {cid!r}")
        window_problem = check_window_conf(comp_conf, timeout, conf.get(cfg.TOPOLOGY_MAX_SPOUT_PENDING.name))
        if window_problem:
            raise invalid(f"component {cid!r}: {window_problem}")
        batch_secs = comp_conf.get(cfg.SPARK_SINK_BATCH_SECS.name, topology_secs)
        if batch_secs is not None and float(batch_secs) > float(timeout):
            raise invalid(f"component {cid!r}: spark.sink.batch.secs ({batch_secs}) is larger than "
                          f"topology.message.timeout.secs ({timeout}); its tuples would time out before "
                          "their batch is written")


def validate_topology(topology: Any, conf: Mapping[str, Any] | None = None) -> None:
    """Raise InvalidTopologyException if ``topology`` (with ``conf``) cannot run."""
    if topology is None:
        raise invalid("no topology given")
    comps = components(topology)
    if not topology.spouts:
        raise invalid("topology has no spouts")
    for cid, (kind, spec) in comps.items():
        _check_component(cid, kind, spec)
    for cid, (_kind, spec) in comps.items():
        _check_inputs(cid, spec.common, comps)
    _check_conf(conf or {}, comps)
