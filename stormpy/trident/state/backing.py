"""Helpers over a BackingMap: the write-through LRU cache and the picklable maker the built-in backends use."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from stormpy.trident.state.codec import decode_value, encode_value
from stormpy.trident.state.contract import BackingMap


class CachedMap(BackingMap):
    """An LRU read cache over a BackingMap, written through (Storm's CachedMap).

    Correct because a partition's keys are written only by that partition's state (group_by
    partitions the keys), and every such write goes through this object: the cache is updated only
    after the store accepted a put, and a failed put drops its keys (the store may hold either
    value). Absent keys are cached as absent for the same reason. Do not enable it where something
    else writes the same keys while the topology runs (another topology on the same table or
    prefix, a script writing through ``open_map()``). ``open_map()`` never caches.
    """

    _ABSENT = object()

    def __init__(self, backing: BackingMap, size: int) -> None:
        if size < 1:
            raise ValueError(f"cache size must be >= 1, got {size}")
        self.backing = backing
        self.size = size
        self.commit_log = bool(getattr(backing, "commit_log", False))
        self.fencing = bool(getattr(backing, "fencing", False))
        self._cache: OrderedDict[tuple, Any] = OrderedDict()

    def multi_get(self, keys: list[tuple]) -> list[Any]:
        cache = self._cache
        out: list[Any] = [None] * len(keys)
        missing: list[int] = []
        for i, key in enumerate(keys):
            value = cache.get(key, self)
            if value is self:
                missing.append(i)
            else:
                cache.move_to_end(key)
                out[i] = None if value is self._ABSENT else decode_value(value)
        if missing:
            fetched = self.backing.multi_get([keys[i] for i in missing])
            for i, value in zip(missing, fetched):
                out[i] = value
                cache[keys[i]] = self._ABSENT if value is None else encode_value(value)
            self._trim()
        return out

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        try:
            self.backing.multi_put(keys, values)
        except BaseException:
            for key in keys:
                self._cache.pop(key, None)
            raise
        self._remember(keys, values)

    def multi_put_if(self, keys: list[tuple], values: list[Any], guard_key: tuple, guard_value: Any) -> bool:
        try:
            applied = self.backing.multi_put_if(keys, values, guard_key, guard_value)
        except BaseException:
            for key in (*keys, guard_key):
                self._cache.pop(key, None)
            raise
        if not applied:
            self._cache.pop(guard_key, None)   # someone else wrote it: read it from the store next time
            return False
        self._remember(keys, values)
        return True

    def _remember(self, keys: list[tuple], values: list[Any]) -> None:
        for key, value in zip(keys, values):
            # Kept as JSON text: every read decodes a private copy, so a caller mutating what it
            # got cannot change the cache (and a deepcopy would cost several times more).
            self._cache[key] = encode_value(value)
            self._cache.move_to_end(key)
        self._trim()

    def items(self) -> Iterator[tuple[tuple, Any]]:
        return self.backing.items()

    def close(self) -> None:
        self._cache.clear()
        self.backing.close()

    def _trim(self) -> None:
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)


class BackingMaker:
    """Picklable ``make_backing`` for the built-in backends: ``cls(*args, **kwargs)`` per partition,
    wrapped in a CachedMap of ``cache_size`` entries when that is > 0."""

    def __init__(self, cls: type[BackingMap], *args: Any, cache_size: int = 0, **kwargs: Any) -> None:
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        self.cls = cls
        self.args = args
        self.kwargs = kwargs
        self.cache_size = cache_size

    def __call__(self, conf: Any, context: Any, partition_index: int, num_partitions: int) -> BackingMap:
        backing = self.cls(*self.args, **self.kwargs)
        return CachedMap(backing, self.cache_size) if self.cache_size else backing

    def uncached(self) -> BackingMap:
        """The backing map without a cache (what ``open_map()`` reads through)."""
        return self.cls(*self.args, **self.kwargs)

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.cls.__name__}({', '.join(parts)})"
