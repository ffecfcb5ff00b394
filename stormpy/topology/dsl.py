"""The user-facing topology DSL: ``Topology``, ``ComponentSpec``, ``Stream`` and ``Grouping``.

Compatible with streamparse so existing topologies port by changing imports::

    class WordCount(Topology):
        sentences = SentenceSpout.spec(par=2)
        split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
        count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=4)

Nothing here runs user code; ``compile.py`` turns a Topology class into the Thrift struct.
"""
from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping
from typing import Any

from stormpy.thrift import storm

DEFAULT_STREAM = "default"


class Stream:
    """A declared output stream: its field names, its id, and whether it is a direct stream."""

    def __init__(self, fields: Iterable[str] | None = None, name: str = DEFAULT_STREAM, direct: bool = False) -> None:
        if isinstance(fields, str):
            fields = [fields]
        self.fields = tuple(fields or ())
        self.name = name
        self.direct = bool(direct)

    def __repr__(self) -> str:
        return f"Stream(fields={list(self.fields)!r}, name={self.name!r}, direct={self.direct})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and (self.fields, self.name, self.direct) == (other.fields, other.name, other.direct)

    def __hash__(self) -> int:
        return hash((self.fields, self.name, self.direct))


def normalize_outputs(outputs: Any) -> dict[str, Stream]:
    """Turn a component's ``outputs`` (field names, or ``Stream`` objects) into stream id -> Stream.

    ``["word"]`` declares the default stream; ``[Stream(["a"], name="x"), ...]`` declares named
    streams. No outputs means the component emits nothing.
    """
    if outputs is None:
        return {}
    if isinstance(outputs, (str, Stream)):
        outputs = [outputs]
    items = list(outputs)
    if not items:
        return {}
    if all(isinstance(item, str) for item in items):
        return {DEFAULT_STREAM: Stream(items, DEFAULT_STREAM)}
    streams: dict[str, Stream] = {}
    for item in items:
        if not isinstance(item, Stream):
            raise TypeError(f"outputs must be all field names or all Stream objects, got {item!r}")
        if item.name in streams:
            raise ValueError(f"stream {item.name!r} is declared twice in outputs")
        streams[item.name] = item
    return streams


class GroupingSpec:
    """How a stream's tuples are spread over the subscribing component's tasks."""

    def __init__(self, kind: str, fields: tuple[str, ...] = (), obj: Any = None) -> None:
        self.kind = kind
        self.fields = fields
        self.obj = obj

    def __repr__(self) -> str:
        if self.kind in ("fields", "partial_key"):
            return f"Grouping.{self.kind}({', '.join(map(repr, self.fields))})"
        if self.kind == "custom":
            return f"Grouping.custom({self.obj!r})"
        return f"Grouping.{self.kind.upper()}"

    def to_thrift(self) -> Any:
        null = storm.NullStruct()
        if self.kind == "fields":
            return storm.Grouping(fields=list(self.fields))
        if self.kind == "global":
            return storm.Grouping(fields=[])
        if self.kind == "partial_key":
            return storm.Grouping(partial_key=list(self.fields))
        if self.kind == "custom":
            return storm.Grouping(custom_serialized=pickle.dumps(self.obj))
        return storm.Grouping(**{self.kind: null})


def _names(names: tuple[Any, ...]) -> tuple[str, ...]:
    if len(names) == 1 and isinstance(names[0], (list, tuple)):
        names = tuple(names[0])
    return tuple(str(n) for n in names)


class Grouping:
    """The groupings of DESIGN section 2, named as in streamparse."""

    SHUFFLE = GroupingSpec("shuffle")
    ALL = GroupingSpec("all")
    GLOBAL = GroupingSpec("global")
    NONE = GroupingSpec("none")
    DIRECT = GroupingSpec("direct")
    LOCAL_OR_SHUFFLE = GroupingSpec("local_or_shuffle")

    @staticmethod
    def fields(*names: str) -> GroupingSpec:
        """Tuples with equal values of ``names`` go to the same task (a stable hash)."""
        return GroupingSpec("fields", _names(names))

    @staticmethod
    def partial_key(*names: str) -> GroupingSpec:
        """Storm's PartialKeyGrouping: each key goes to the less loaded of two tasks."""
        return GroupingSpec("partial_key", _names(names))

    @staticmethod
    def custom(obj: Any) -> GroupingSpec:
        """``obj`` has ``prepare(context, stream, targets)`` and ``choose_tasks(task_id, values)``."""
        return GroupingSpec("custom", obj=obj)


class StreamRef:
    """``component["stream"]``: a non-default stream of a component, used as a key of ``inputs``."""

    def __init__(self, spec: "ComponentSpec", stream: str) -> None:
        self.spec = spec
        self.stream = stream

    def __repr__(self) -> str:
        return f"{self.spec!r}[{self.stream!r}]"


class ComponentSpec:
    """One component of a topology: its class (or instance), inputs, parallelism and config.

    Made by ``Component.spec()``; the Topology class gives it its id (the attribute name)
    unless ``name`` was passed. With ``instance`` (``SomeBolt(...).spec(...)``, or passed
    here), that object is what runs: compiled into ``PythonObject.serialized`` with
    cloudpickle (lambdas and closures inside included), unpickled by each task.
    """

    def __init__(self, component_cls: type, name: str | None = None, inputs: Any = None,
                 par: int | None = 1, config: Mapping[str, Any] | None = None,
                 instance: Any = None) -> None:
        if instance is not None and not isinstance(instance, component_cls):
            raise TypeError(f"instance {instance!r} is not a {component_cls.__name__}")
        self.component_cls = component_cls
        self.instance = instance
        self.name = name
        self.inputs = inputs
        self.par = 1 if par is None else par
        self.config = dict(config or {})

    def __getitem__(self, stream: str) -> StreamRef:
        return StreamRef(self, stream)

    def __repr__(self) -> str:
        return f"<{self.component_cls.__name__} spec {self.name!r}>"

    def input_groupings(self) -> list[tuple["ComponentSpec", str, GroupingSpec]]:
        """The inputs as (upstream spec, stream id, grouping); a list of inputs means shuffle."""
        if self.inputs is None:
            return []
        if isinstance(self.inputs, Mapping):
            pairs = list(self.inputs.items())
        elif isinstance(self.inputs, (ComponentSpec, StreamRef)):
            pairs = [(self.inputs, Grouping.SHUFFLE)]
        else:
            pairs = [(item, Grouping.SHUFFLE) for item in self.inputs]
        result = []
        for source, grouping in pairs:
            if isinstance(source, StreamRef):
                spec, stream = source.spec, source.stream
            elif isinstance(source, ComponentSpec):
                spec, stream = source, DEFAULT_STREAM
            else:
                raise TypeError(f"inputs of {self.name!r} must be component specs, got {source!r}")
            if not isinstance(grouping, GroupingSpec):
                raise TypeError(f"grouping for input {source!r} of {self.name!r} must be a Grouping, got {grouping!r}")
            result.append((spec, stream, grouping))
        return result


class TopologyType(type):
    """Collects the ComponentSpec attributes of a Topology class body, in definition order."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> "TopologyType":
        cls = super().__new__(mcs, name, bases, namespace)
        specs: list[ComponentSpec] = []
        for base in reversed(cls.__mro__[1:]):
            specs.extend(getattr(base, "_own_specs", []))
        own = []
        for attr, value in namespace.items():
            if isinstance(value, ComponentSpec):
                if value.name is None:
                    value.name = attr
                own.append(value)
        cls._own_specs = own
        cls.specs = specs + own
        return cls


class Topology(metaclass=TopologyType):
    """Base class of user topologies: component specs as class attributes, ``config`` a dict."""

    config: dict[str, Any] = {}
    specs: list[ComponentSpec] = []
