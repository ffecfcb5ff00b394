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
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

Clock = Callable[[], float]


def wall_clock_ms() -> float:
    """Milliseconds since the epoch (Storm's timestamps)."""
    return time.time() * 1000.0


@dataclass(frozen=True)
class Count:
    """A window length or sliding interval in tuples (Storm's ``BaseWindowedBolt.Count``)."""

    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or isinstance(self.value, bool) or self.value < 1:
            raise ValueError(f"Count must be a positive integer, got {self.value!r}")


@dataclass(frozen=True)
class Duration:
    """A window length or sliding interval in seconds (Storm's ``BaseWindowedBolt.Duration``)."""

    secs: float

    def __post_init__(self) -> None:
        if not isinstance(self.secs, (int, float)) or isinstance(self.secs, bool) or self.secs <= 0:
            raise ValueError(f"Duration must be a positive number of seconds, got {self.secs!r}")

    @property
    def ms(self) -> int:
        return int(round(self.secs * 1000))


Length = Count | Duration


@dataclass(frozen=True)
class WindowSpec:
    """What a windowed bolt declared; timestamps and intervals in milliseconds."""

    length: Length
    sliding: Length
    timestamp_field: str | None = None
    lag_ms: int = 0
    watermark_interval_ms: int = 1000
    late_stream: str | None = None

    @property
    def is_event_time(self) -> bool:
        return self.timestamp_field is not None

    @property
    def is_tumbling(self) -> bool:
        """Consecutive, non-overlapping windows: the slide equals the length."""
        return self.length == self.sliding


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


def validate_timeout(spec: WindowSpec, timeout_secs: float, max_spout_pending: int | None = None) -> str | None:
    """Storm's ``WindowedBoltExecutor.validate``: None if fine, else the one-line complaint.

    A sliding window's tuple is acked only when it left every window holding it, so duration
    windows must fit in the message timeout (length + slide) and count windows in max spout
    pending; a tumbling window's tuples are acked once it was processed (its length must fit).
    """
    parts = (spec.length,) if spec.is_tumbling else (spec.length, spec.sliding)
    durations = [x.ms for x in parts if isinstance(x, Duration)]
    if durations and sum(durations) >= timeout_secs * 1000:
        return (f"window length + sliding interval ({sum(durations) / 1000:g}s) must be less than "
                f"topology.message.timeout.secs ({timeout_secs:g}s): tuples are acked only when they "
                "leave the last window that holds them")
    counts = [x.value for x in parts if isinstance(x, Count)]
    if counts and max_spout_pending and sum(counts) > max_spout_pending:
        return (f"window length + sliding interval ({sum(counts)} tuples) is more than "
                f"topology.max.spout.pending ({max_spout_pending}): the windows could never fill")
    return None


def spec_from_conf(conf: Mapping[str, Any]) -> WindowSpec | None:
    """The window a component config declares (Storm's ``topology.bolts.*`` keys), or None."""
    from stormpy import config as k

    def pick(count_key: str, ms_key: str) -> Length | None:
        if conf.get(count_key) is not None:
            return Count(int(conf[count_key]))
        if conf.get(ms_key) is not None:
            return Duration(float(conf[ms_key]) / 1000.0)
        return None

    length = pick(k.WINDOW_LENGTH_COUNT.name, k.WINDOW_LENGTH_DURATION_MS.name)
    if length is None:
        return None
    sliding = pick(k.SLIDING_INTERVAL_COUNT.name, k.SLIDING_INTERVAL_DURATION_MS.name) or length
    return WindowSpec(length, sliding, timestamp_field=conf.get(k.TIMESTAMP_FIELD.name),
                      lag_ms=int(conf.get(k.TIMESTAMP_MAX_LAG_MS.name) or 0),
                      watermark_interval_ms=int(conf.get(k.WATERMARK_INTERVAL_MS.name) or 1000),
                      late_stream=conf.get(k.LATE_TUPLE_STREAM.name))


def spec_to_conf(spec: WindowSpec) -> dict[str, Any]:
    """The component config that declares ``spec`` (read back by ``spec_from_conf``)."""
    from stormpy import config as k

    conf: dict[str, Any] = {}
    for value, count_key, ms_key in ((spec.length, k.WINDOW_LENGTH_COUNT.name, k.WINDOW_LENGTH_DURATION_MS.name),
                                     (spec.sliding, k.SLIDING_INTERVAL_COUNT.name, k.SLIDING_INTERVAL_DURATION_MS.name)):
        if isinstance(value, Count):
            conf[count_key] = value.value
        else:
            conf[ms_key] = value.ms
    if spec.timestamp_field is not None:
        conf[k.TIMESTAMP_FIELD.name] = spec.timestamp_field
        conf[k.TIMESTAMP_MAX_LAG_MS.name] = spec.lag_ms
        conf[k.WATERMARK_INTERVAL_MS.name] = spec.watermark_interval_ms
    if spec.late_stream is not None:
        conf[k.LATE_TUPLE_STREAM.name] = spec.late_stream
    return conf


def check_window_conf(comp_conf: Mapping[str, Any], timeout_secs: float, max_spout_pending: Any) -> str | None:
    """Validation at submit (Nimbus calls it on component configs): None or a one-line complaint."""
    spec = spec_from_conf(comp_conf)
    if spec is None:
        return None
    return validate_timeout(spec, timeout_secs, int(max_spout_pending) if max_spout_pending else None)
