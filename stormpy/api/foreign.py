"""Components that are not Python classes run natively: ShellBolt/ShellSpout and JavaBolt/JavaSpout.

streamparse declares them with ``ShellBolt.spec(command=..., script=..., outputs=...)`` and
``JavaBolt.spec(full_class_name=..., args_list=..., outputs=...)``. A shell component compiles
to Storm's ``ShellComponent`` and runs as a subprocess per task speaking Storm's multilang
protocol (``stormpy.multilang``). A JVM component is accepted by the DSL (so streamparse
topology files import and define unchanged) and refused with one line at local start or
submit: a stormpy worker has no JVM.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stormpy.api.component import Component
from stormpy.thrift import storm
from stormpy.api.dsl import ComponentSpec


def _shell_spec(cls: type, kind: str, name: str | None, command: str | None, script: str | None,
                inputs: Any, par: Any, config: Mapping[str, Any] | None, outputs: Any) -> ComponentSpec:
    if not command:
        raise ValueError(f"{cls.__name__}.spec needs command=... (the program Storm runs)")
    if script is None:
        raise TypeError(f"{cls.__name__}.spec needs script=... (the empty string if {command!r} takes "
                        "no arguments)")
    return ComponentSpec(cls, name=name, inputs=inputs, par=par, config=config, outputs=outputs or [],
                         kind=kind, shell=(command, script))


def to_java_arg(arg: Any) -> Any:
    """streamparse's ``to_java_arg``: a basic Python value as a Thrift ``JavaObjectArg``."""
    if isinstance(arg, bool):
        return storm.JavaObjectArg(bool_arg=arg)
    if isinstance(arg, int):
        return storm.JavaObjectArg(long_arg=arg)     # Python has one int: Java's long
    if isinstance(arg, bytes):
        return storm.JavaObjectArg(binary_arg=arg)
    if isinstance(arg, str):
        return storm.JavaObjectArg(string_arg=arg)
    if isinstance(arg, float):
        return storm.JavaObjectArg(double_arg=arg)
    raise TypeError(f"only basic data types can be arguments to a JavaObject constructor, given {arg!r}")


def _java_spec(cls: type, kind: str, name: str | None, serialized_java: bytes | None,
               full_class_name: str | None, args_list: Any, inputs: Any, par: Any,
               config: Mapping[str, Any] | None, outputs: Any) -> ComponentSpec:
    """The spec keeps the Java object (``thrift_topology`` shows it, as in streamparse); local
    start and submit refuse it."""
    java_object: Any
    if serialized_java is not None:
        if not isinstance(serialized_java, bytes):
            raise TypeError("serialized_java must be bytes or None")
        what, java_object = f"{cls.__name__} (serialized Java)", serialized_java
    else:
        if not full_class_name:
            raise ValueError("full_class_name is required")
        if args_list is None:
            raise TypeError("args_list must not be None")
        what = f"{cls.__name__} ({full_class_name})"
        java_object = storm.JavaObject(full_class_name=full_class_name,
                                       args_list=[to_java_arg(arg) for arg in args_list])
    spec = ComponentSpec(cls, name=name, inputs=inputs, par=par, config=config, outputs=outputs or [],
                         kind=kind, java=what)
    spec.java_object = java_object
    return spec


class ShellBolt(Component):
    """A bolt run by a command in any language, through Storm's multilang protocol."""

    @classmethod
    def spec(cls, name: str | None = None, command: str | None = None, script: str | None = None,  # type: ignore[override]
             inputs: Any = None, par: Any = None, config: Mapping[str, Any] | None = None,
             outputs: Any = None) -> ComponentSpec:
        """streamparse's ``ShellBolt.spec``: run ``command script`` per task (cwd = the code dir)."""
        return _shell_spec(cls, "bolt", name, command, script, inputs, par, config, outputs)


class ShellSpout(Component):
    """A spout run by a command in any language, through Storm's multilang protocol."""

    @classmethod
    def spec(cls, name: str | None = None, command: str | None = None, script: str | None = None,  # type: ignore[override]
             par: Any = None, config: Mapping[str, Any] | None = None, outputs: Any = None) -> ComponentSpec:
        """streamparse's ``ShellSpout.spec``."""
        return _shell_spec(cls, "spout", name, command, script, None, par, config, outputs)


class JavaBolt(Component):
    """A JVM bolt: accepted in topology files, refused at local start or submit."""

    @classmethod
    def spec(cls, name: str | None = None, serialized_java: bytes | None = None,  # type: ignore[override]
             full_class_name: str | None = None, args_list: Any = None, inputs: Any = None, par: Any = 1,
             config: Mapping[str, Any] | None = None, outputs: Any = None) -> ComponentSpec:
        return _java_spec(cls, "bolt", name, serialized_java, full_class_name, args_list, inputs, par, config, outputs)


class JavaSpout(Component):
    """A JVM spout: accepted in topology files, refused at local start or submit."""

    @classmethod
    def spec(cls, name: str | None = None, serialized_java: bytes | None = None,  # type: ignore[override]
             full_class_name: str | None = None, args_list: Any = None, par: Any = 1,
             config: Mapping[str, Any] | None = None, outputs: Any = None) -> ComponentSpec:
        return _java_spec(cls, "spout", name, serialized_java, full_class_name, args_list, None, par, config, outputs)
