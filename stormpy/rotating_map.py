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

_COMPACT_MIN = 4096


class RotatingMap(Generic[K, V]):
    """A dict whose entries expire after ``num_buckets - 1`` calls to :meth:`rotate`.

    One dict holds the values (one lookup per operation); each bucket lists the keys put
    during its generation. A key removed and put again stays in its old bucket's list too,
    which can only shorten its life: keys here are random 64-bit ids, so this does not occur.

    Removed keys stay in their bucket's list until it expires; at tens of thousands of trees
    a second that list held every tree of a whole rotation period (tens of MB per map, a
    sawtooth in worker RSS). So the newest list is compacted whenever it grows past twice the
    live entries (and at least ``_COMPACT_MIN``): each list then stays O(live entries), and
    the copying is amortized O(1) per put, since at least that many puts happen in between.
    """

    def __init__(self, num_buckets: int = 3) -> None:
        if num_buckets < 2:
            raise ValueError("RotatingMap needs at least 2 buckets")
        self._values: dict[K, V] = {}
        self._buckets: deque[list[K]] = deque([] for _ in range(num_buckets))
        self._compact_at = _COMPACT_MIN

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def get(self, key: K, default: Any = None) -> Any:
        return self._values.get(key, default)

    def put(self, key: K, value: V) -> None:
        values = self._values
        if key in values:
            values[key] = value
            return
        values[key] = value  # before compacting, which keeps only keys in values
        bucket = self._buckets[0]
        bucket.append(key)
        if len(bucket) > self._compact_at:
            self._compact_newest()

    def _compact_newest(self) -> None:
        values = self._values
        self._buckets[0] = [key for key in self._buckets[0] if key in values]
        self._compact_at = max(_COMPACT_MIN, 2 * len(values))

    def pop(self, key: K, default: Any = None) -> Any:
        return self._values.pop(key, default)

    def live(self) -> dict[K, V]:
        """The live entries as the dict this map keeps them in, for hot loops.

        ``len()``, ``get`` and ``pop``/``del`` on it act exactly as on the map (a removed key's
        generation list forgets it when the list expires or is compacted); inserting into it
        would bypass the generations, so use :meth:`put` for that.
        """
        return self._values

    def items(self) -> list[tuple[K, V]]:
        return list(self._values.items())

    def clear(self) -> None:
        self._values.clear()
        for bucket in self._buckets:
            bucket.clear()

    def compact(self) -> None:
        """Drop removed keys from the generation lists (for maps that are never rotated)."""
        values = self._values
        for i, bucket in enumerate(self._buckets):
            self._buckets[i] = [key for key in bucket if key in values]

    def rotate(self) -> list[tuple[K, V]]:
        """Start a new generation; return the (key, value) pairs of the oldest one."""
        oldest = self._buckets.pop()
        self._buckets.appendleft([])
        values = self._values
        expired = []
        for key in oldest:
            value = values.pop(key, None)
            if value is not None:
                expired.append((key, value))
        return expired
