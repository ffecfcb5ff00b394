"""Pure window managers (Storm's ``WindowManager`` with its trigger and eviction policies).

No threads and no I/O: a :class:`WindowManager` is fed items (``add``) and told the time
(``tick``); it calls ``on_activation(window)`` for every non-empty window that fires and
``on_expiry(items)`` for items that have left every window that could hold them (the
windowed bolt acks those). The clock is injected (``clock() -> ms since the epoch``), so
tests drive it with a fake one. ``WindowedBolt`` calls the manager from its executor thread.

One model covers Storm's four kinds of window (count/duration length x count/duration
slide) in processing time and event time:

- Items are *released* in timestamp order. In processing time an item's timestamp is the
  clock at ``add`` and it is released at once; in event time the timestamp comes from the
  tuple and items wait until the watermark passes them (``watermark = min over input streams
  of the newest timestamp seen, minus the lag``, recomputed every watermark interval, as
  Storm's ``WaterMarkEventGenerator``). An item older than the current watermark is *late*:
  ``add`` returns False and the manager never holds it.
- A window fires at a *reference time* ``r``: for a duration slide ``S`` at every ``r`` on
  the slide grid up to the watermark (processing time: the clock), skipping empty stretches
  (Storm's ``WatermarkTimeTriggerPolicy``); for a count slide ``M`` after every ``M``
  released items, ``r`` being the newest released item's timestamp.
- The window at ``r`` holds the released items with ``ts <= r`` that survive eviction: a
  duration length ``L`` keeps ``r - L < ts``, a count length ``N`` keeps the newest ``N``.
  Evicted items never come back (references only grow): they are expired.
"""
from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from stormpy.topology.windows import (Count, Duration, Length, WindowSpec, check_window_conf, spec_from_conf,  # noqa: F401
                                      spec_to_conf, validate_timeout)

log = logging.getLogger(__name__)

Clock = Callable[[], float]


def wall_clock_ms() -> float:
    """Milliseconds since the epoch (Storm's timestamps)."""
    return time.time() * 1000.0


class Window:
    """One firing of a window: what ``process_window`` receives (Storm's ``TupleWindow``)."""

    __slots__ = ("_items", "_new", "_expired", "start_timestamp", "end_timestamp")

    def __init__(self, items: list[Any], new: list[Any], expired: list[Any],
                 start_timestamp: int, end_timestamp: int) -> None:
        self._items = items
        self._new = new
        self._expired = expired
        #: Milliseconds: the window covers ``start_timestamp < ts <= end_timestamp``.
        self.start_timestamp = start_timestamp
        self.end_timestamp = end_timestamp

    def get(self) -> list[Any]:
        """Every item in the window, oldest first."""
        return list(self._items)

    def get_new(self) -> list[Any]:
        """Items not in the previous window."""
        return list(self._new)

    def get_expired(self) -> list[Any]:
        """Items that left the windows since the previous window fired."""
        return list(self._expired)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return (f"Window({self.start_timestamp}..{self.end_timestamp}, {len(self._items)} items, "
                f"{len(self._new)} new, {len(self._expired)} expired)")


class WindowManager:
    """Holds items, fires windows, expires items; see the module docstring for the model.

    ``add(item, ts_ms=None, stream=None) -> bool`` (False: late, not held), ``tick()`` (fires
    what the clock allows), ``held()`` (every item still held, for failing them on a crash).
    """

    def __init__(self, spec: WindowSpec, on_activation: Callable[[Window], None],
                 on_expiry: Callable[[list[Any]], None], clock: Clock = wall_clock_ms) -> None:
        self.spec = spec
        self.on_activation = on_activation
        self.on_expiry = on_expiry
        self.clock = clock
        self._released: list[tuple[int, int, Any]] = []   # (ts, seq, item), ts order
        self._waiting: list[tuple[int, int, Any]] = []    # event time: not yet under the watermark
        self._seq = 0
        self._since_fire = 0                               # releases since the last count trigger
        self._previous: set[int] = set()                   # seqs of the previous window
        self._expired: list[Any] = []                      # since the previous activation
        self._next_end: int | None = None                  # next reference of a duration slide
        self.watermark: int | None = None
        self._stream_max: dict[Hashable, int] = {}
        now = int(clock())
        self._next_watermark = now + spec.watermark_interval_ms
        if not spec.is_event_time and isinstance(spec.sliding, Duration):
            # windows cover (end - L, end]: start the grid 1 ms back so that an item added
            # in the manager's first millisecond is inside the first window, not before it
            self._next_end = now - 1 + spec.sliding.ms

    # ------------------------------------------------------------ input
    def add(self, item: Any, ts_ms: float | None = None, stream: Hashable = None) -> bool:
        """Hold ``item``; in event time ``ts_ms`` is its timestamp. False: late (not held)."""
        seq = self._seq
        self._seq += 1
        if not self.spec.is_event_time:
            self._release((int(self.clock()), seq, item))
            return True
        if ts_ms is None:
            raise ValueError("event-time windows need a timestamp for every tuple")
        ts = int(ts_ms)
        if self.watermark is not None and ts < self.watermark:
            return False
        if ts > self._stream_max.get(stream, -2**63):
            self._stream_max[stream] = ts
        bisect.insort(self._waiting, (ts, seq, item), key=lambda e: (e[0], e[1]))
        return True

    def tick(self) -> None:
        """Advance to the clock: a new watermark when due (event time), duration triggers."""
        now = int(self.clock())
        if self.spec.is_event_time:
            if now >= self._next_watermark:
                self._next_watermark = now + self.spec.watermark_interval_ms
                self.advance_watermark()
        elif isinstance(self.spec.sliding, Duration):
            self._fire_until(now)

    def advance_watermark(self) -> None:
        """Event time: recompute the watermark now and release/fire what it passes."""
        if not self._stream_max:
            return
        candidate = min(self._stream_max.values()) - self.spec.lag_ms
        if self.watermark is not None and candidate <= self.watermark:
            return
        self.watermark = candidate
        cut = bisect.bisect_right(self._waiting, candidate, key=lambda e: e[0])
        ready, self._waiting = self._waiting[:cut], self._waiting[cut:]
        for entry in ready:
            self._release(entry)
        if isinstance(self.spec.sliding, Duration):
            self._fire_until(candidate)

    def held(self) -> list[Any]:
        """Every item the manager still holds (released or waiting), oldest first."""
        return [e[2] for e in self._released] + [e[2] for e in self._waiting]

    # ------------------------------------------------------------ persistence (stateful windows)
    def snapshot(self, encode: Callable[[Any], Any]) -> dict[str, Any]:
        """A JSON-able picture of what the manager holds (items through ``encode``)."""
        return {
            "released": [[ts, seq, encode(item)] for ts, seq, item in self._released],
            "waiting": [[ts, seq, encode(item)] for ts, seq, item in self._waiting],
            "expired": [encode(item) for item in self._expired],
            "seq": self._seq, "since_fire": self._since_fire, "previous": sorted(self._previous),
            "next_end": self._next_end, "watermark": self.watermark,
            "stream_max": [[list(k) if isinstance(k, tuple) else k, v] for k, v in self._stream_max.items()],
        }

    def restore(self, snap: Mapping[str, Any], decode: Callable[[Any], Any]) -> None:
        """Continue from ``snapshot`` (taken by a predecessor): items come back through ``decode``."""
        self._released = [(int(ts), int(seq), decode(item)) for ts, seq, item in snap["released"]]
        self._waiting = [(int(ts), int(seq), decode(item)) for ts, seq, item in snap["waiting"]]
        self._expired = [decode(item) for item in snap["expired"]]
        self._seq = int(snap["seq"])
        self._since_fire = int(snap["since_fire"])
        self._previous = set(snap["previous"])
        if snap["next_end"] is not None:
            self._next_end = int(snap["next_end"])
        self.watermark = snap["watermark"]
        self._stream_max = {tuple(k) if isinstance(k, list) else k: int(v) for k, v in snap["stream_max"]}

    # ------------------------------------------------------------ triggers
    def _release(self, entry: tuple[int, int, Any]) -> None:
        self._released.append(entry)
        if isinstance(self.spec.sliding, Count):
            self._since_fire += 1
            if self._since_fire >= self.spec.sliding.value:
                self._since_fire = 0
                self._fire(entry[0])

    def _fire_until(self, limit: int) -> None:
        """Duration slide: fire every reference on the slide grid up to ``limit``."""
        slide = self.spec.sliding.ms  # type: ignore[union-attr]
        if self._next_end is None:  # event time: the grid is aligned to the first timestamp
            if not self._released:
                return
            first = self._released[0][0]
            self._next_end = -(-first // slide) * slide  # the first grid point at or after it
        end = self._next_end
        while end <= limit:
            if self._fire(end):
                end += slide
                continue
            # Empty: jump to the first grid point at or after the next item (Storm skips
            # empty windows the same way), or past the limit if there is none.
            later = [e[0] for e in self._released if e[0] > end]
            target = min(later) if later else limit + 1
            end += slide * max(1, -(-(target - end) // slide))
        self._next_end = end

    def _fire(self, reference: int) -> bool:
        """Evict for ``reference``, then activate the window if it holds anything."""
        self._evict(reference)
        in_window = [e for e in self._released if e[0] <= reference]
        length = self.spec.length
        if isinstance(length, Count):
            start = in_window[0][0] - 1 if in_window else reference
        else:
            start = reference - length.ms
        if not in_window:
            return False
        items = [e[2] for e in in_window]
        new = [e[2] for e in in_window if e[1] not in self._previous]
        self._previous = {e[1] for e in in_window}
        expired, self._expired = self._expired, []
        self.on_activation(Window(items, new, expired, int(start), int(reference)))
        if self.spec.is_tumbling:
            # Every item belongs to exactly this window: it is done once the window was
            # processed (its emits anchored), not when the next window would evict it.
            done = {e[1] for e in in_window}
            self._released = [e for e in self._released if e[1] not in done]
            self._previous = set()
            self._expired.extend(items)
            self.on_expiry(items)
        return True

    def _evict(self, reference: int) -> None:
        length = self.spec.length
        if isinstance(length, Count):
            upto = bisect.bisect_right(self._released, reference, key=lambda e: e[0])
            cut = max(0, upto - length.value)
        else:
            cut = bisect.bisect_right(self._released, reference - length.ms, key=lambda e: e[0])
        if not cut:
            return
        gone = [e[2] for e in self._released[:cut]]
        del self._released[:cut]
        self._expired.extend(gone)
        self.on_expiry(gone)
