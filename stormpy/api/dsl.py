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

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GroupingSpec) and (self.kind, self.fields) == (other.kind, other.fields) \
            and (self.obj is other.obj or self.obj == other.obj)

    def __hash__(self) -> int:
        return hash((self.kind, self.fields))

    def __repr__(self) -> str:
        if self.kind in ("fields", "partial_key"):
            return f"Grouping.{self.kind}({', '.join(map(repr, self.fields))})"
        if self.kind == "custom":
            return f"Grouping.custom({self.obj!r})"
        return f"Grouping.{self.kind.upper()}"

    def to_thrift(self) -> Any:
        null = storm.NullStruct()
        if self.kind == "thrift":
            return self.obj
        if self.kind == "jvm":
            raise ValueError(f"{self.obj} needs a JVM to choose tasks; stormpy workers run Python only "
                             "(use Grouping.custom(obj) with a Python object)")
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
        fields = _names(names)
        if not fields:
            raise ValueError("Grouping.fields() needs at least one field name (Grouping.GLOBAL sends "
                             "everything to one task)")
        return GroupingSpec("fields", fields)

    @staticmethod
    def partial_key(*names: str) -> GroupingSpec:
        """Storm's PartialKeyGrouping: each key goes to the less loaded of two tasks."""
        return GroupingSpec("partial_key", _names(names))

    @staticmethod
    def custom(obj: Any) -> GroupingSpec:
        """``obj`` has ``prepare(context, stream, targets)`` and ``choose_tasks(task_id, values)``."""
        return GroupingSpec("custom", obj=obj)

    @staticmethod
    def custom_object(java_class_name: str, arg_list: Any = ()) -> GroupingSpec:
        """streamparse's Java CustomStreamGrouping: accepted here, refused at local start/submit."""
        return GroupingSpec("jvm", obj=f"Grouping.custom_object({java_class_name!r})")

    @staticmethod
    def custom_serialized(java_serialized: bytes) -> GroupingSpec:
        """streamparse's serialized Java grouping: accepted here, refused at local start/submit."""
        return GroupingSpec("jvm", obj="Grouping.custom_serialized(<serialized Java>)")


class StreamRef:
    """``component["stream"]``: a non-default stream of a component, used as a key of ``inputs``."""

    def __init__(self, spec: "ComponentSpec", stream: str) -> None:
        self.spec = spec
        self.stream = stream

    def __repr__(self) -> str:
        return f"{self.spec!r}[{self.stream!r}]"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamRef) and other.spec is self.spec and other.stream == self.stream

    def __hash__(self) -> int:
        return hash((id(self.spec), self.stream))


def check_par(par: Any) -> int | dict[str, int]:
    """streamparse's parallelism rules: a positive int, or ``{"env": positive int}`` (chosen with
    ``-e/--environment`` at local start or submit)."""
    if isinstance(par, Mapping):
        for env, hint in par.items():
            if not isinstance(env, str) or not isinstance(hint, int) or isinstance(hint, bool):
                raise TypeError(f"a par dict maps environment names to integers; given {env!r}: {hint!r}")
            if hint < 1:
                raise ValueError(f"parallelism for environment {env!r} must be at least 1, given {hint}")
        return dict(par)
    if not isinstance(par, int) or isinstance(par, bool):
        raise TypeError(f"parallelism must be a positive integer, given {par!r}")
    if par < 1:
        raise ValueError(f"parallelism must be at least 1, given {par}")
    return par


def resolve_par(name: str, par: int | Mapping[str, int], environment: str | None) -> int:
    """The task count of a spec for ``environment``; a dict ``par`` without one is an error."""
    if not isinstance(par, Mapping):
        return par
    keys = ", ".join(sorted(par))
    if environment is None:
        raise ValueError(f"component {name!r} has a parallelism per environment ({keys}); "
                         "choose one with -e/--environment")
    if environment not in par:
        raise ValueError(f"component {name!r} has no parallelism for environment {environment!r} "
                         f"(it has: {keys})")
    return par[environment]


def _guess_kind(cls: type) -> str | None:
    if callable(getattr(cls, "next_tuple", None)):
        return "spout"
    if callable(getattr(cls, "process", None)) or callable(getattr(cls, "process_batch", None)):
        return "bolt"
    return None


class ComponentSpec:
    """One component of a topology: its class (or instance), inputs, parallelism and config.

    Made by ``Component.spec()``; the Topology class gives it its id (the attribute name)
    unless ``name`` was passed. With ``instance`` (``SomeBolt(...).spec(...)``, or passed
    here), that object is what runs: compiled into ``PythonObject.serialized`` with
    cloudpickle (lambdas and closures inside included), unpickled by each task.

    As in streamparse, ``par`` and ``config`` default to the class attributes of the same
    names, and malformed arguments fail here (``TypeError``/``ValueError``), where the user
    wrote them. ``shell`` (``(command, script)``) and ``java`` (a description) mark
    ShellBolt/ShellSpout and JavaBolt/JavaSpout specs; ``outputs`` overrides the class's.
    """

    def __init__(self, component_cls: type, name: str | None = None, inputs: Any = None,
                 par: Any = None, config: Mapping[str, Any] | None = None,
                 instance: Any = None, outputs: Any = None, kind: str | None = None,
                 shell: tuple[str, str] | None = None, java: str | None = None) -> None:
        if instance is not None and not isinstance(instance, component_cls):
            raise TypeError(f"instance {instance!r} is not a {component_cls.__name__}")
        self.component_cls = component_cls
        self.instance = instance
        self.name = name
        self.kind = kind or _guess_kind(component_cls)
        if self.kind is None:
            raise TypeError(f"{component_cls.__name__} is neither a Spout nor a Bolt: only their "
                            "subclasses can be components of a topology")
        self.shell = shell
        self.java = java
        self.java_object: Any = None     # JavaObject or serialized bytes (set by JavaBolt/JavaSpout.spec)
        declared_by = instance if instance is not None else component_cls   # an instance may set its own
        self.outputs = declared_by.outputs if outputs is None and hasattr(declared_by, "outputs") else outputs
        if isinstance(self.outputs, str):
            raise TypeError(f"outputs of {component_cls.__name__} must be a list of field names or of "
                            f"Streams, not the string {self.outputs!r}")
        self.streams = normalize_outputs(self.outputs)
        if inputs is not None and not isinstance(inputs, (Mapping, list, tuple, ComponentSpec, StreamRef,
                                                          storm.GlobalStreamId)):
            raise TypeError(f"inputs must be a list or a dict of component specs, given {inputs!r}")
        self.inputs = inputs
        if par is None:
            par = getattr(component_cls, "par", None) or 1
        self.par = check_par(par)
        if config is None:
            config = getattr(component_cls, "config", None)
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"config of {component_cls.__name__} must be a dict, given {config!r}")
        self.config = dict(config or {})

    def __getitem__(self, stream: str) -> StreamRef:
        if self.streams and stream not in self.streams:
            raise KeyError(f"{self.name or self.component_cls.__name__} has no stream {stream!r} "
                           f"(its streams: {', '.join(sorted(self.streams))})")
        return StreamRef(self, stream)

    def __repr__(self) -> str:
        return f"<{self.component_cls.__name__} spec {self.name!r}>"

    def input_groupings(self) -> list[tuple["ComponentSpec | str", str, GroupingSpec]]:
        """The inputs as (upstream spec or component id, stream id, grouping); a list means shuffle.

        Sources may be specs, ``spec["stream"]`` or Thrift ``GlobalStreamId`` objects (whose
        ``componentId`` is a spec or a component id: that is how cycles are written).
        """
        if self.inputs is None:
            return []
        if isinstance(self.inputs, Mapping):
            pairs = list(self.inputs.items())
        elif isinstance(self.inputs, (ComponentSpec, StreamRef, storm.GlobalStreamId)):
            pairs = [(self.inputs, None)]
        elif isinstance(self.inputs, (list, tuple)):
            pairs = [(item, None) for item in self.inputs]
        else:
            raise TypeError(f"inputs of {self.name!r} must be a list or a dict, given {self.inputs!r}")
        result: list[tuple[ComponentSpec | str, str, GroupingSpec]] = []
        for source, grouping in pairs:
            if isinstance(source, StreamRef):
                spec, stream = source.spec, source.stream
            elif isinstance(source, ComponentSpec):
                spec, stream = source, DEFAULT_STREAM
            elif isinstance(source, storm.GlobalStreamId):
                spec, stream = source.componentId, source.streamId or DEFAULT_STREAM
                if not isinstance(spec, (str, ComponentSpec)):
                    raise TypeError(f"GlobalStreamId input of {self.name!r} has componentId {spec!r}")
            else:
                raise TypeError(f"inputs of {self.name!r} must be component specs or GlobalStreamIds, got {source!r}")
            if grouping is None:
                direct = isinstance(spec, ComponentSpec) and spec.streams.get(stream) is not None \
                    and spec.streams[stream].direct
                grouping = Grouping.DIRECT if direct else Grouping.SHUFFLE
            elif isinstance(grouping, storm.Grouping):
                grouping = GroupingSpec("thrift", obj=grouping)
            if not isinstance(grouping, GroupingSpec):
                raise TypeError(f"grouping for input {source!r} of {self.name!r} must be a Grouping, got {grouping!r}")
            result.append((spec, stream, grouping))
        return result


def check_specs(topology_name: str, specs: list[ComponentSpec]) -> None:
    """streamparse's checks at class-definition time: unique names, bolts with inputs, spouts
    with outputs, well-formed inputs and fields groupings on declared fields."""
    by_name: dict[str, ComponentSpec] = {}
    for spec in specs:
        if spec.name in by_name and by_name[spec.name] is not spec:
            raise ValueError(f"{topology_name}: duplicate component name {spec.name!r}")
        by_name[spec.name] = spec
    for spec in specs:
        if spec.kind == "spout" and not spec.streams:
            raise ValueError(f"{spec.component_cls.__name__} {spec.name!r} requires at least one output, "
                             "because it is a Spout")
        if spec.kind != "bolt":
            continue
        groupings = spec.input_groupings()
        if not groupings:
            raise ValueError(f"{spec.component_cls.__name__} {spec.name!r} requires at least one input, "
                             "because it is a Bolt")
        for source, stream, grouping in groupings:
            upstream = by_name.get(source) if isinstance(source, str) else source
            if upstream is None or grouping.kind not in ("fields", "partial_key"):
                continue
            declared = upstream.streams.get(stream)
            fields = declared.fields if declared is not None else ()
            for field in grouping.fields:
                if declared is not None and field not in fields:
                    raise ValueError(f"field {field!r} in the grouping of {spec.name!r} is not an output field "
                                     f"of stream {stream!r} of {upstream.name!r} (fields: {', '.join(fields)})")


def normalized_inputs(spec: ComponentSpec) -> dict[Any, GroupingSpec] | None:
    """The inputs as streamparse keeps them once the class exists: ``{upstream["stream"]:
    grouping}`` (``GlobalStreamId`` kept for inputs named by component id)."""
    if spec.inputs is None:
        return None
    result: dict[Any, GroupingSpec] = {}
    for source, stream, grouping in spec.input_groupings():
        key = StreamRef(source, stream) if isinstance(source, ComponentSpec) else \
            storm.GlobalStreamId(componentId=source, streamId=stream)
        result[key] = grouping
    return result


class TopologyType(type):
    """Collects the ComponentSpec attributes of a Topology class body, in definition order,
    and checks them as streamparse does when the class is defined."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> "TopologyType":
        config = namespace.get("config")
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"{name}.config must be a dict, given {config!r}")
        for attr, value in namespace.items():
            if _guess_kind(type(value)) is not None and hasattr(type(value), "spec") \
                    and not attr.startswith("__"):
                raise TypeError(f"{name}.{attr} is a component instance, not a spec: "
                                f"did you forget to call .spec(...)?")
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
        check_specs(name, cls.specs)
        if not any(spec.kind == "spout" for spec in cls.specs) and not _builds_own_graph(cls, namespace):
            raise ValueError(f"{name}: a Topology requires at least one Spout")
        for spec in own:
            spec.inputs = normalized_inputs(spec)
        return cls

    @property
    def thrift_spouts(cls) -> dict[str, Any]:
        """streamparse's ``Topology.thrift_spouts``: component id -> ``SpoutSpec``."""
        return cls.thrift_topology.spouts

    @property
    def thrift_bolts(cls) -> dict[str, Any]:
        """streamparse's ``Topology.thrift_bolts``: component id -> ``Bolt``."""
        return cls.thrift_topology.bolts

    @property
    def thrift_topology(cls) -> Any:
        """streamparse's ``Topology.thrift_topology``: the ``StormTopology`` struct as streamparse
        shows it (a dict ``par`` stays a dict, JavaBolt/JavaSpout as their Java objects), built on
        first use and kept, so changes to it stick as in streamparse (``Topology.read`` replaces it).
        """
        cached = cls.__dict__.get("_thrift_topology")
        if cached is None:
            from stormpy.api.compile import compile_topology

            cached = compile_topology(cls, strict=False)
            cls._thrift_topology = cached
        return cached


def _builds_own_graph(cls: type, namespace: Mapping[str, Any]) -> bool:
    """Classes that need no spout specs: the DSL's base, abstract bases (``_base_topology_class``),
    and Trident topologies (they compile their own graph of framework components)."""
    return not cls.__mro__[1:-1] or namespace.get("_base_topology_class", False) \
        or callable(getattr(cls, "compile_storm_topology", None))


class Topology(metaclass=TopologyType):
    """Base class of user topologies: component specs as class attributes, ``config`` a dict."""

    config: dict[str, Any] = {}
    specs: list[ComponentSpec] = []

    @classmethod
    def write(cls, stream: Any) -> None:
        """streamparse's ``Topology.write``: the StormTopology in Thrift's binary protocol, to a
        path or a binary file object."""
        from thriftpy2.protocol import TBinaryProtocolFactory
        from thriftpy2.utils import serialize

        data = serialize(cls.thrift_topology, TBinaryProtocolFactory())
        if isinstance(stream, str):
            with open(stream, "wb") as fh:
                fh.write(data)
        else:
            stream.write(data)

    @classmethod
    def read(cls, stream: Any) -> None:
        """streamparse's ``Topology.read``: replace this class's ``thrift_topology`` with one
        read (Thrift binary protocol) from a path or a binary file object. As in streamparse,
        ``specs`` becomes empty: Python specs cannot be rebuilt from Thrift."""
        from thriftpy2.protocol import TBinaryProtocolFactory
        from thriftpy2.utils import deserialize

        if isinstance(stream, str):
            with open(stream, "rb") as fh:
                data = fh.read()
        else:
            data = stream.read()
        cls._thrift_topology = deserialize(storm.StormTopology(), data, TBinaryProtocolFactory())
        cls.specs = []

    @classmethod
    def to_flux_dict(cls, name: str) -> dict[str, Any]:
        """streamparse's ``Topology.to_flux_dict``: the dict Storm's Flux reads (see ``flux.py``)."""
        from stormpy.api.flux import to_flux_dict

        return to_flux_dict(cls, name)


def instance_spec(component: Any) -> Any:
    """The ``spec`` of a component declared by instance whose outputs come from its settings (a
    connector spout's translator or reader): ``ComponentSpec`` reads a class's ``outputs``, so
    the instance's own are passed along."""
    def spec(name: str | None = None, inputs: Any = None, par: Any = None,
             config: Mapping[str, Any] | None = None) -> Any:
        return ComponentSpec(type(component), name=name, inputs=inputs, par=par, config=config,
                             instance=component, outputs=component.outputs)
    return spec
