"""MemoryMapState: a Trident map state kept in the memory of one process (tests, local mode).

Maps live in a process-global registry keyed by name, so every partition of a state, and
``factory.open_map()`` called by the test after a ``stormpy local`` run in the same process, see the
same data. A factory created without a name gets a unique one at creation, so one factory object
(and every pickled copy of it) refers to one map. In a cluster each worker process has its own
registry: use SqliteMapState or RedisMapState there.

Values are stored as JSON text, exactly as the SQLite and Redis backends store them, so a test on
MemoryMapState sees the same semantics (tuples come back as lists, a non-JSON value fails at
once, nothing handed out aliases what is stored). Keys stay tuples (the dict lookup is the hot
path), but a key that JSON could not store fails here too.
Thread-safe: readers use the GIL-atomic ``dict.get``; writers take the registry lock.
"""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from stormpy.trident.state.backing import BackingMaker
from stormpy.trident.state.codec import decode_value, encode_value
from stormpy.trident.state.contract import NON_TRANSACTIONAL, OPAQUE, TRANSACTIONAL, BackingMap
from stormpy.trident.state.map_state import MapStateFactory

log = logging.getLogger(__name__)

_REGISTRY: dict[str, dict[tuple, str]] = {}
_LOCK = threading.Lock()


_SCALARS = (str, int, float, bool, type(None))


def _check_key(key: tuple) -> tuple:
    """``key``, after checking that JSON could store it (the other backends must accept it too)."""
    for field in key:
        if not isinstance(field, _SCALARS):
            encode_value(list(key))     # raises TypeError naming the key when it is not JSON-able
            break
    return key


class MemoryMapState(BackingMap):
    """The BackingMap over the named in-process map; build factories with the classmethods."""

    commit_log = True   # an opaque state keeps its commit log here (state.OPAQUE_LOG_KEY)
    fencing = True      # multi_put_if: owner and fence records (state.Fence)
    placement = "process"   # each worker process has its own registry (stormpy.trident.planner.placement)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"MemoryMapState name must be a non-empty string, got {name!r}")
        self.name = name
        with _LOCK:
            self._data = _REGISTRY.setdefault(name, {})

    def multi_get(self, keys: list[tuple]) -> list[Any]:
        get = self._data.get
        out: list[Any] = []
        for key in keys:
            text = get(key)
            out.append(None if text is None else decode_value(text))
        return out

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        # Encode everything first: a non-JSON value fails the put before any key changes.
        encoded = {_check_key(k): encode_value(v) for k, v in zip(keys, values)}
        with _LOCK:
            self._data.update(encoded)

    def multi_put_if(self, keys: list[tuple], values: list[Any], guard_key: tuple, guard_value: Any) -> bool:
        encoded = {_check_key(k): encode_value(v) for k, v in zip(keys, values)}
        expected = None if guard_value is None else encode_value(guard_value)
        with _LOCK:
            if self._data.get(guard_key) != expected:
                return False
            self._data.update(encoded)
        return True

    def items(self) -> Iterator[tuple[tuple, Any]]:
        with _LOCK:
            snapshot = list(self._data.items())
        for key, text in snapshot:
            yield key, decode_value(text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name,))

    # ------------------------------------------------------------------ factories
    @classmethod
    def transactional(cls, name: str | None = None) -> MapStateFactory:
        """Stores ``[txid, value]`` per key; a replayed txid is skipped."""
        return cls._factory(name, TRANSACTIONAL)

    @classmethod
    def opaque(cls, name: str | None = None) -> MapStateFactory:
        """Stores ``[txid, prev, curr]`` per key; a replayed txid is recomputed from prev."""
        return cls._factory(name, OPAQUE)

    @classmethod
    def non_transactional(cls, name: str | None = None) -> MapStateFactory:
        """Stores the bare value; a replayed batch is applied again."""
        return cls._factory(name, NON_TRANSACTIONAL)

    @classmethod
    def _factory(cls, name: str | None, kind: str) -> MapStateFactory:
        if name is None:
            name = f"memory-{uuid.uuid4().hex[:12]}"
        cls(name)  # validate the name now, at build time, not in the worker
        return MapStateFactory(BackingMaker(cls, name), kind)

    @staticmethod
    def clear(name: str) -> None:
        """Empty the named map in this process (tests that reuse a name start empty).

        Cleared in place, not removed, so states already holding the map stay coherent with it.
        """
        with _LOCK:
            data = _REGISTRY.get(name)
            if data is not None:
                data.clear()

    @staticmethod
    def names() -> list[str]:
        """The names of the maps that exist in this process."""
        with _LOCK:
            return sorted(_REGISTRY)
