"""The Tuple a bolt receives, and the per-stream value classes that name its fields.

Compatible with pystorm's ``Tuple(id, component, stream, task, values)``: ``tup.values`` is
a namedtuple of the stream's declared fields, so ``tup.values[0]`` and ``tup.values.word``
both work. Executors build one Tuple per received message on their own thread; the extra
slots carry the acking state (the tuple's anchors and the XOR of the edges emitted from it)
so that acking needs no lookup anywhere else.
"""
from __future__ import annotations

import keyword
import logging
import re
from collections import namedtuple
from typing import Any

from stormpy.streams import HEARTBEAT, TICK

log = logging.getLogger(__name__)

_IDENTIFIER_RE = re.compile(r"\W|^(?=\d)")
_VALUES_CLASSES: dict[tuple[str, str, tuple[str, ...]], type] = {}


def values_class(component: str, stream: str, fields: tuple[str, ...] | list[str]) -> type:
    """A namedtuple class for one (component, stream)'s fields, cached per process.

    Field names that are not identifiers (``"user-id"``) are rewritten the way pystorm does
    (non-word characters become ``_``), so attribute access still works for them.
    """
    key = (component, stream, tuple(fields))
    cached = _VALUES_CLASSES.get(key)
    if cached is None:
        names = []
        for name in fields:
            ident = _IDENTIFIER_RE.sub("_", name) or "_"
            if keyword.iskeyword(ident):
                ident += "_"
            names.append(ident)
        type_name = _IDENTIFIER_RE.sub("_", f"{component}_{stream}_values")
        cached = _VALUES_CLASSES[key] = namedtuple(type_name, names, rename=True)
    return cached


class Tuple:
    """One tuple delivered to a bolt: ``id, component, stream, task, values``.

    Built with ``STORMPY_COMPILE=1``, ``tuple.pxd`` makes it an extension type whose slots
    are C fields, which the compiled receive loop (``task/drivers.py``) writes directly; it
    behaves the same (subclasses, attribute reads and writes, equality, unpacking, copies and
    pickles, which ``__reduce__`` makes loadable by either build), except that its methods
    cannot be replaced on the class and ``__class__`` cannot be reassigned.

    ``id`` is the tuple's edge id in its first tuple tree (None for unanchored tuples), which
    is unique enough for logging and de-duplication in user code.
    """

    __slots__ = ("component", "stream", "task", "values", "_id", "_anchors", "_ack_val",
                 "_recv", "_done", "_skey")

    def __init__(self, id: Any, component: str, stream: str, task: int, values: Any,
                 anchors: tuple[int, ...] | None = None, recv: float = 0.0,
                 skey: tuple[str, str] | None = None) -> None:
        self._id = id
        self.component = component
        self.stream = stream
        self.task = task
        self.values = values
        self._anchors = anchors
        self._ack_val = 0
        self._recv = recv
        self._done = False
        self._skey = skey

    @property
    def id(self) -> Any:
        if self._id is None and self._anchors:
            self._id = self._anchors[1]   # the edge of the first ``(root, edge)`` pair
        return self._id

    @property
    def is_tick(self) -> bool:
        return self.stream == TICK

    @property
    def is_heartbeat(self) -> bool:
        return self.stream == HEARTBEAT

    def is_tick_tuple(self) -> bool:
        """pystorm's spelling of :attr:`is_tick`."""
        return self.stream == TICK

    def is_heartbeat_tuple(self) -> bool:
        """pystorm's spelling of :attr:`is_heartbeat` (stormpy never sends heartbeat tuples)."""
        return self.stream == HEARTBEAT

    # pystorm's Tuple is ``namedtuple("Tuple", "id component stream task values")``:
    # unpacking, indexing and ``_asdict`` work the same here.
    _fields = ("id", "component", "stream", "task", "values")

    def __iter__(self) -> Any:
        return iter((self.id, self.component, self.stream, self.task, self.values))

    def __len__(self) -> int:
        return 5

    def __getitem__(self, index: int | slice) -> Any:
        return (self.id, self.component, self.stream, self.task, self.values)[index]

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self))

    def __repr__(self) -> str:
        return (f"Tuple(id={self.id!r}, component={self.component!r}, stream={self.stream!r}, "
                f"task={self.task!r}, values={self.values!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tuple):
            return NotImplemented
        return (self.id, self.component, self.stream, self.task, tuple(self.values)) == (
            other.id, other.component, other.stream, other.task, tuple(other.values))

    def __hash__(self) -> int:
        return id(self)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles and copies as ``_restore(class, fields, extra)`` in both builds: compiled,
        Cython's own pickling would keep only the C fields (a subclass's slots lost) in a
        format the interpreted module cannot read, and workers of one cluster may differ."""
        extra = dict(getattr(self, "__dict__", None) or {})
        for klass in type(self).__mro__:
            if klass in _OWN_CLASSES:
                continue
            slots = klass.__dict__.get("__slots__", ())
            for name in (slots,) if isinstance(slots, str) else slots:
                if name not in ("__dict__", "__weakref__") and hasattr(self, name):
                    extra[name] = getattr(self, name)
        return _restore, (type(self), tuple(getattr(self, name, None) for name in _FIELDS), extra)


class ReceivedTuple(Tuple):
    """A Tuple built by the bolt executor's receive loop (one per received message).

    Same slots and behaviour as :class:`Tuple`, but the receive loop stores the slots itself
    and runs no ``__init__``: a Python ``__init__`` costs a second interpreter frame per
    received tuple (about 1,100 of the 2,600 machine instructions a Tuple cost, callgrind).
    Interpreted, calling the class runs object's ``__init__``; compiled (``tuple.pxd``: both
    classes are extension types, their slots C fields), ``ReceivedTuple.__new__(ReceivedTuple)``
    is the allocation alone and the class, like ``Tuple``, takes ``Tuple``'s arguments.
    """

    __slots__ = ()
    __init__ = object.__init__   # type: ignore[assignment]  # no frame: the caller fills the slots


_FIELDS: tuple[str, ...] = tuple(Tuple.__slots__)
#: Slots that are C numbers in the compiled build (``tuple.pxd``): a pickle of a tuple that never
#: set one (a subclass whose ``__init__`` skips ``Tuple``'s) carries None, restored as the default.
_NUMBER_DEFAULTS: dict[str, Any] = {"_ack_val": 0, "_recv": 0.0, "_done": False}
_OWN_CLASSES = (Tuple, ReceivedTuple, object)


def _restore(cls: type, fields: tuple[Any, ...], extra: dict[str, Any]) -> Tuple:
    """A pickled or copied Tuple (or subclass) again (see ``Tuple.__reduce__``)."""
    tup: Tuple = cls.__new__(cls)
    for name, value in zip(_FIELDS, fields):
        setattr(tup, name, _NUMBER_DEFAULTS.get(name) if value is None and name in _NUMBER_DEFAULTS else value)
    for name, value in extra.items():
        setattr(tup, name, value)
    return tup
