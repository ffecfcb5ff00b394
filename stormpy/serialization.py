"""Tuple value serialization: msgpack, plus the types registered in ``topology.serializers``.

Every tuple value must survive a trip through msgpack, because in a cluster tuples cross
workers as msgpack frames. Types msgpack does not know can be registered in the topology
config: ``{"Decimal": "mymod:DecimalSerializer"}`` (a type name or ``module:Class``) maps to a
serializer class with ``serialize(obj) -> bytes`` and ``deserialize(data) -> obj``; such values
travel as msgpack extension types whose codes are assigned in sorted key order, so every
process of a topology agrees on them.

``stormpy local`` never packs tuples, but its executors call :meth:`Serialization.check_values`
on every emit, so a topology that would fail in a cluster fails the same way locally. The
check is a type walk (no encoding), cheap enough for the per-tuple path.
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any

import msgpack

from stormpy import config as cfg

log = logging.getLogger(__name__)

# Types msgpack encodes natively; checked with ``type(v) in SCALARS`` on the hot path.
SCALARS = frozenset({str, int, float, bool, type(None), bytes})
#: The integers msgpack carries (int64 and uint64); the emit paths check ints against these inline.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1


class SerializationError(TypeError):
    """A value that can be neither msgpack-encoded nor handled by a registered serializer."""


def _load_class(path: str) -> Any:
    module_name, sep, qualname = path.partition(":")
    if not sep:
        module_name, _, qualname = path.rpartition(".")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def type_names(cls: type) -> tuple[str, str]:
    """The two names a type can be registered under: ``Name`` and ``module:Qual.Name``."""
    return cls.__name__, f"{cls.__module__}:{cls.__qualname__}"


class Serialization:
    """Encodes and checks tuple values for one topology.

    Immutable after construction, so executor threads and the transport share one instance
    without locks. Serializer classes are imported when the instance is built: a bad
    ``topology.serializers`` entry fails at start-up, not on the first unusual tuple.
    """

    def __init__(self, serializers: Mapping[str, str] | None = None) -> None:
        self._by_name: dict[str, tuple[int, Any]] = {}
        self._by_code: dict[int, Any] = {}
        for code, name in enumerate(sorted(serializers or {})):
            if code > 127:
                raise SerializationError("topology.serializers: at most 128 serializers")
            target = (serializers or {})[name]
            try:
                ser_cls = _load_class(target)
                serializer = ser_cls() if isinstance(ser_cls, type) else ser_cls
            except Exception as exc:  # import errors of user code: name the entry
                raise SerializationError(f"topology.serializers: cannot load {target!r} for {name!r}: {exc}") from exc
            self._by_name[name] = (code, serializer)
            self._by_code[code] = serializer
        self._type_cache: dict[type, tuple[int, Any] | None] = {}

    # ------------------------------------------------------------ checking
    def registered(self, cls: type) -> tuple[int, Any] | None:
        """The (ext code, serializer) registered for ``cls`` (or a base class), or None."""
        try:
            return self._type_cache[cls]
        except KeyError:
            pass
        found = None
        if self._by_name:
            for klass in cls.__mro__:
                for name in type_names(klass):
                    if name in self._by_name:
                        found = self._by_name[name]
                        break
                if found:
                    break
        self._type_cache[cls] = found
        return found

    def check_values(self, values: Any) -> None:
        """Raise SerializationError naming the type of the first value that cannot travel."""
        if not isinstance(values, (list, tuple)):
            raise SerializationError(f"tuple values must be a list or tuple, got {type(values).__name__}")
        for value in values:
            if type(value) not in SCALARS or type(value) is int:
                self.check_value(value)

    def check_value(self, value: Any) -> None:
        """Recursive check of one value (the slow path of :meth:`check_values`)."""
        t = type(value)
        if t is int:
            if not INT_MIN <= value <= INT_MAX:
                raise SerializationError(f"integer {value} does not fit in 64 bits")
            return
        if t in SCALARS:
            return
        if t in (list, tuple) or (isinstance(value, (list, tuple)) and self.registered(t) is None):
            for item in value:
                self.check_value(item)
            return
        if t is dict:
            for key, item in value.items():
                self.check_value(key)
                self.check_value(item)
            return
        if self.registered(t) is not None:
            return
        raise SerializationError(
            f"value of type {t.__module__}.{t.__qualname__} is not msgpack-serializable; "
            f"register a serializer for {t.__name__!r} in topology.serializers")

    # ------------------------------------------------------------ encoding
    def _default(self, obj: Any) -> msgpack.ExtType:
        found = self.registered(type(obj))
        if found is None:
            t = type(obj)
            raise SerializationError(f"value of type {t.__module__}.{t.__qualname__} is not msgpack-serializable")
        code, serializer = found
        return msgpack.ExtType(code, serializer.serialize(obj))

    def _ext_hook(self, code: int, data: bytes) -> Any:
        serializer = self._by_code.get(code)
        if serializer is None:
            return msgpack.ExtType(code, data)
        return serializer.deserialize(data)

    def packer(self) -> msgpack.Packer:
        """A new Packer (not thread-safe: one per thread) that knows the registered types."""
        return msgpack.Packer(default=self._default, use_bin_type=True)

    def packb(self, obj: Any) -> bytes:
        """Encode ``obj`` (a frame, a message list, a value) with the registered types."""
        try:
            return msgpack.packb(obj, default=self._default, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            if isinstance(exc, SerializationError):
                raise
            raise SerializationError(str(exc)) from exc

    def unpackb(self, data: bytes) -> Any:
        """Decode bytes written by :meth:`packb`; int map keys allowed (task ids, root ids)."""
        return msgpack.unpackb(data, ext_hook=self._ext_hook, raw=False, strict_map_key=False)

    def unpackb_lenient(self, data: bytes) -> tuple[Any, list[Exception]]:
        """Like :meth:`unpackb`, but a registered serializer that raises (user code: any
        exception) leaves an :class:`Undecodable` in place of its value and its exception in the
        returned list, so the transport drops only the tuples holding one, not the whole frame."""
        errors: list[Exception] = []

        def hook(code: int, payload: bytes) -> Any:
            try:
                return self._ext_hook(code, payload)
            except Exception as exc:  # noqa: BLE001 - user code: reported by the caller
                errors.append(exc)
                return Undecodable(code, exc)

        return msgpack.unpackb(data, ext_hook=hook, raw=False, strict_map_key=False), errors


class Undecodable:
    """A value whose registered serializer raised in ``deserialize`` (see ``unpackb_lenient``)."""

    __slots__ = ("code", "error")

    def __init__(self, code: int, error: Exception) -> None:
        self.code = code
        self.error = error


def contains_undecodable(value: Any) -> Exception | None:
    """The error of the first :class:`Undecodable` inside ``value`` (lists, tuples, dicts), or None."""
    if isinstance(value, Undecodable):
        return value.error
    if isinstance(value, (list, tuple)):
        for item in value:
            found = contains_undecodable(item)
            if found is not None:
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            found = contains_undecodable(key) or contains_undecodable(item)
            if found is not None:
                return found
    return None


def stable_key_bytes(values: Any) -> bytes:
    """The bytes fields grouping hashes: msgpack of the values, identical in every process."""
    return msgpack.packb(values, use_bin_type=True, default=repr)


def from_conf(conf: Mapping[str, Any]) -> Serialization:
    """The Serialization a topology's config asks for (``topology.serializers``)."""
    return Serialization(conf.get(cfg.TOPOLOGY_SERIALIZERS.name) or {})
