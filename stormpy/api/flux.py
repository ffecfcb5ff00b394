"""streamparse's ``Topology.to_flux_dict``: a topology as the dict Storm's Flux reads (YAML).

streamparse describes its Python components to Flux as shell components running
``streamparse_run module.Class`` (FluxShellSpout/FluxShellBolt); this writes the same, so a Flux
file made from a stormpy topology is the one streamparse would make. Java components become
their class and constructor arguments; serialized Java and pickled Python objects (custom
groupings, component instances) cannot be written in Flux's terms and are a ``TypeError``.
"""
from __future__ import annotations

import logging
from typing import Any

from stormpy.api.dsl import DEFAULT_STREAM, ComponentSpec

log = logging.getLogger(__name__)

FLUX_SHELL_SPOUT = "org.apache.storm.flux.wrappers.spouts.FluxShellSpout"
FLUX_SHELL_BOLT = "org.apache.storm.flux.wrappers.bolts.FluxShellBolt"
NO_FIELDS = "NONE_BUT_FLUX_WANTS_SOMETHING_HERE"   # streamparse's placeholder: Flux needs a list


def to_python_arg(java_arg: Any) -> Any:
    """The set value of a Thrift ``JavaObjectArg`` (streamparse's ``to_python_arg``)."""
    return next((value for value in vars(java_arg).values() if value is not None), None)


def _spec_to_flux(spec: ComponentSpec) -> dict[str, Any]:
    if spec.java is not None:
        if isinstance(spec.java_object, bytes):
            raise TypeError(f"Flux does not support specifying serialized Java objects. Given: {spec!r}")
        return {"id": spec.name, "className": spec.java_object.full_class_name,
                "constructorArgs": [to_python_arg(arg) for arg in spec.java_object.args_list]}
    if spec.instance is not None:
        raise TypeError(f"Flux cannot describe a component given as an instance: {spec!r}")
    if spec.shell is not None:
        command, script = spec.shell
    else:   # what `sparse` submits for a Python component
        command, script = "streamparse_run", f"{spec.component_cls.__module__}.{spec.component_cls.__qualname__}"
    flux: dict[str, Any] = {"id": spec.name, "className": FLUX_SHELL_SPOUT if spec.kind == "spout" else FLUX_SHELL_BOLT,
                            "constructorArgs": [[command, script]], "configMethods": []}
    if not spec.streams:
        flux["constructorArgs"].append([NO_FIELDS])
    for stream_id, stream in spec.streams.items():
        if stream_id == DEFAULT_STREAM:
            flux["constructorArgs"].append(list(stream.fields))
        else:
            flux["configMethods"].append({"name": "setNamedStream", "args": [stream_id, list(stream.fields)]})
    flux["parallelism"] = spec.par
    for key, value in spec.config.items():
        flux["configMethods"].append({"name": "addComponentConfig", "args": [key, value]})
    return flux


def _grouping_to_flux(stream_id: str, grouping: Any) -> dict[str, Any]:
    """A Thrift ``Grouping`` as Flux's grouping: its set field's name upper-cased, fields as args."""
    flux: dict[str, Any] = {"streamId": stream_id}
    for key, value in vars(grouping).items():
        if value is None:
            continue
        if key in ("custom_object", "custom_serialized"):
            raise TypeError(f"Flux cannot describe a pickled Python custom grouping (stream {stream_id!r})")
        flux["type"] = key.upper()
        if key in ("fields", "partial_key"):
            if value:
                flux["args"] = list(value)
            else:
                flux["type"] = "GLOBAL"
    return flux


def to_flux_dict(topology_cls: Any, name: str) -> dict[str, Any]:
    """streamparse's ``Topology.to_flux_dict(name)``: name, spouts, bolts and streams (empty
    sections left out), components in definition order."""
    flux: dict[str, Any] = {"name": name, "bolts": [], "spouts": [], "streams": []}
    bolts = topology_cls.thrift_topology.bolts
    for spec in topology_cls.specs:
        if spec.kind == "spout":
            flux["spouts"].append(_spec_to_flux(spec))
            continue
        flux["bolts"].append(_spec_to_flux(spec))
        for stream, grouping in bolts[spec.name].common.inputs.items():
            flux["streams"].append({"from": stream.componentId, "to": spec.name,
                                    "grouping": _grouping_to_flux(stream.streamId, grouping)})
    return {key: value for key, value in flux.items() if value}
