"""The window a windowed bolt declares, as it travels in a component's config: pure data and checks.

A windowed bolt writes its window into its component config under Storm's ``topology.bolts.*``
keys (``spec_to_conf``); Nimbus and the client read it back (``spec_from_conf``) to check at
submit that its tuples can be acked before they time out (``check_window_conf``), and the
bolt reads it again in the worker. Here, not in ``stormpy.windowing`` (the window managers
and the bolt), so that validating a topology imports no engine code.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stormpy import config as k


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
