"""RotatingMap: a dict whose entries time out by generations (Storm's ``RotatingMap``).

Used by the acker's ledger (tuple trees it tracks) and by spout tasks (trees they wait for),
so it lives below both ``acker/`` and ``task/``. Nothing here reads the clock: owners call
:meth:`RotatingMap.rotate` from a timer, and tests call it by hand. Not thread-safe: one
thread (an executor's) owns each map.
"""
from __future__ import annotations

import logging
from collections import deque
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING: Any = object()


class RotatingMap(Generic[K, V]):
    """A dict whose entries expire after ``num_buckets - 1`` calls to :meth:`rotate`.

    As in Storm: a deque of dicts, one per generation. ``put`` writes into the newest;
    ``get``/``pop`` try the newest first and the older ones only while they hold anything;
    ``rotate`` drops the oldest dict whole. Nothing is kept per key besides its one dict entry:
    no key lists to compact, so a put costs one dict store however many entries are in flight
    (the earlier single dict with per-generation key lists spent ~0.5 us per put compacting
    them at 100k trees in flight).

    Trees mostly settle within one generation, so the older dicts are empty or emptying; their
    entry count (``_older_len``) is kept so the common case never looks at them.
    """

    def __init__(self, num_buckets: int = 3) -> None:
        if num_buckets < 2:
            raise ValueError("RotatingMap needs at least 2 buckets")
        self._buckets: deque[dict[K, V]] = deque({} for _ in range(num_buckets))
        self._newest: dict[K, V] = self._buckets[0]
        self._older: list[dict[K, V]] = list(self._buckets)[1:]   # newest first
        self._older_len = 0   # their entries (removed only through this map)

    def __len__(self) -> int:
        return len(self._newest) + self._older_len

    def __contains__(self, key: object) -> bool:
        if key in self._newest:
            return True
        return bool(self._older_len) and any(key in bucket for bucket in self._older)

    def get(self, key: K, default: Any = None) -> Any:
        value = self._newest.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if self._older_len:
            for bucket in self._older:
                value = bucket.get(key, _MISSING)
                if value is not _MISSING:
                    return value
        return default

    def put(self, key: K, value: V) -> None:
        """Set ``key`` in the newest generation (a key from an older one moves there)."""
        if self._older_len and key not in self._newest:
            self._pop_older(key, None)
        self._newest[key] = value

    def pop(self, key: K, default: Any = None) -> Any:
        value = self._newest.pop(key, _MISSING)
        if value is not _MISSING:
            return value
        if self._older_len:
            return self._pop_older(key, default)
        return default

    def _pop_older(self, key: K, default: Any) -> Any:
        for bucket in self._older:
            value = bucket.pop(key, _MISSING)
            if value is not _MISSING:
                self._older_len -= 1
                return value
        return default

    def newest(self) -> dict[K, V]:
        """The newest generation's dict, for hot loops (valid until the next :meth:`rotate`).

        A hit there (``get``, ``pop``, ``del``) is a hit in the map; on a miss ask the map
        itself, which also looks at the older generations. Insert into it directly only a key
        that none of :meth:`older` holds, else use :meth:`put`.
        """
        return self._newest

    def older(self) -> list[dict[K, V]]:
        """The generations before the newest that hold entries (newest first), for hot loops to
        check a key against before inserting it into :meth:`newest` directly; read-only. Only
        :meth:`rotate` adds entries to them."""
        return [bucket for bucket in self._older if bucket] if self._older_len else []

    def items(self) -> list[tuple[K, V]]:
        return [item for bucket in self._buckets for item in bucket.items()]

    def clear(self) -> None:
        for bucket in self._buckets:
            bucket.clear()
        self._older_len = 0

    def compact(self) -> None:
        """Nothing to do: removed keys leave nothing behind (kept for maps never rotated)."""

    def rotate(self) -> list[tuple[K, V]]:
        """Start a new generation; return the (key, value) pairs of the oldest one."""
        oldest = self._buckets.pop()
        self._buckets.appendleft({})
        self._newest = self._buckets[0]
        self._older = list(self._buckets)[1:]
        self._older_len = sum(map(len, self._older))
        return list(oldest.items())
