"""``WindowedBolt``: Storm's ``BaseWindowedBolt`` on stormpy's executor (DESIGN section 12).

The user declares a window (``with_window``/``with_tumbling_window`` with
``WindowedBolt.Count(n)`` or ``WindowedBolt.Duration(secs)``, and for event time
``with_timestamp_field``/``with_lag``/``with_watermark_interval``/``with_late_tuple_stream``)
on the class, on an instance handed to ``spec`` (Storm's ``new MyBolt().withWindow(...)``),
in ``__init__`` or in ``initialize``, and implements ``process_window(window)``.

How it runs, all on the executor thread: the bolt's driver is a ``TupleDriver`` without
auto-ack, so every received tuple stays *held* by its task; ``process`` hands it to a
:class:`~stormpy.windowing.windows.WindowManager`; the executor's timer (``on_timer``)
advances processing time and watermarks. When a window fires, ``process_window`` runs with
every emit anchored to the window's tuples; a tuple is acked when the manager expires it:
for a sliding window when it has left every window that holds it (Storm's rule), for a
tumbling window right after ``process_window`` of its one window returned. If the bolt raises, the executor fails
every held tuple (they replay) and re-creates the bolt with empty windows. Late tuples
(event time, older than the watermark) go to the late-tuple stream, anchored, then are
acked; with no late stream they are logged and acked (Storm's behaviour).

Windows declared before ``spec`` travel in the component config under Storm's
``topology.bolts.*`` keys, so submit checks the message timeout (``check_window_conf`` in ``windows``);
windows declared only in ``initialize`` are checked when the task starts.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.api.component import Bolt
from stormpy.api.contract import BoltOutputCollector
from stormpy.task.drivers import Driver, TupleDriver
from stormpy.api.tuple import Tuple
from stormpy.windowing import windows as w

log = logging.getLogger(__name__)
#: ``timer_interval_secs`` when the user assigned none (``None`` is a value they may assign).
_UNSET: Any = object()

#: How often (at most) the executor's timer advances a time-based window, in seconds.
_MAX_TIMER_SECS = 0.25


class _Hybrid:
    """A builder method that works on the class (class-wide declaration) and on an instance."""

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj: Any, cls: type) -> Callable[..., Any]:
        target = obj if obj is not None else cls

        def call(*args: Any, **kwargs: Any) -> Any:
            opts = dict(getattr(target, "_window_opts", None) or {})
            self.fn(opts, *args, **kwargs)
            target._window_opts = opts  # on the class: a class attribute every task inherits
            return target

        call.__doc__ = self.fn.__doc__
        return call


def _length(value: Any, what: str) -> w.Count | w.Duration:
    if isinstance(value, (w.Count, w.Duration)):
        return value
    raise TypeError(f"{what} must be WindowedBolt.Count(n) or WindowedBolt.Duration(secs), got {value!r}")


def _positive_ms(secs: Any, what: str, allow_zero: bool = False) -> int:
    if not isinstance(secs, (int, float)) or isinstance(secs, bool) or secs < 0 or (secs == 0 and not allow_zero):
        raise ValueError(f"{what} must be a {'non-negative' if allow_zero else 'positive'} number of seconds, got {secs!r}")
    return int(round(secs * 1000))


@_Hybrid
def _with_window(opts: dict[str, Any], length: Any, sliding_interval: Any = None) -> None:
    """A sliding window of ``length`` advancing every ``sliding_interval`` (default: tumbling)."""
    opts["length"] = _length(length, "window length")
    opts["sliding"] = _length(sliding_interval, "sliding interval") if sliding_interval is not None else opts["length"]


@_Hybrid
def _with_tumbling_window(opts: dict[str, Any], length: Any) -> None:
    """Consecutive, non-overlapping windows of ``length``."""
    opts["length"] = opts["sliding"] = _length(length, "window length")


@_Hybrid
def _with_timestamp_field(opts: dict[str, Any], name: str) -> None:
    """Event time: each tuple's timestamp (ms since the epoch) is its field ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"timestamp field must be a field name, got {name!r}")
    opts["timestamp_field"] = name


@_Hybrid
def _with_lag(opts: dict[str, Any], secs: float) -> None:
    """Event time: how far out of order tuples may arrive (the watermark trails by this)."""
    opts["lag_ms"] = _positive_ms(secs, "lag", allow_zero=True)


@_Hybrid
def _with_watermark_interval(opts: dict[str, Any], secs: float) -> None:
    """Event time: recompute the watermark this often (default 1 s)."""
    opts["watermark_interval_ms"] = _positive_ms(secs, "watermark interval")


@_Hybrid
def _with_late_tuple_stream(opts: dict[str, Any], stream: str) -> None:
    """Event time: tuples older than the watermark are emitted (their values) on ``stream``."""
    if not isinstance(stream, str) or not stream:
        raise ValueError(f"late tuple stream must be a stream name, got {stream!r}")
    opts["late_stream"] = stream


def spec_from_opts(opts: Mapping[str, Any] | None) -> w.WindowSpec | None:
    """The WindowSpec the builder calls declared, or None if no window was declared."""
    if not opts or "length" not in opts:
        return None
    return w.WindowSpec(opts["length"], opts["sliding"], timestamp_field=opts.get("timestamp_field"),
                        lag_ms=opts.get("lag_ms", 0), watermark_interval_ms=opts.get("watermark_interval_ms", 1000),
                        late_stream=opts.get("late_stream"))


class _ComponentConfiguration:
    """Storm's ``getComponentConfiguration`` for compile: the window as ``topology.bolts.*`` keys.

    On an instance: its declaration. On a class declared by class: the class-wide declaration,
    else what a no-argument instance declares in ``__init__`` (if it can be made)."""

    def __get__(self, obj: Any, cls: type) -> Callable[[], dict[str, Any]]:
        def get() -> dict[str, Any]:
            opts = getattr(obj if obj is not None else cls, "_window_opts", None)
            if obj is None and not opts:
                try:
                    opts = getattr(cls(), "_window_opts", None)
                except Exception:  # needs arguments: checked when the task starts instead
                    opts = None
            spec = spec_from_opts(opts)
            return w.spec_to_conf(spec) if spec is not None else {}
        return get


class WindowedBolt(Bolt):
    """A bolt that processes windows of tuples: implement ``process_window(window)``."""

    Count = w.Count
    Duration = w.Duration

    with_window = _with_window
    with_tumbling_window = _with_tumbling_window
    with_timestamp_field = _with_timestamp_field
    with_lag = _with_lag
    with_watermark_interval = _with_watermark_interval
    with_late_tuple_stream = _with_late_tuple_stream
    get_component_configuration = _ComponentConfiguration()

    _window_opts: dict[str, Any] | None = None
    #: The manager's clock (ms since the epoch); tests may replace it before tuples arrive.
    clock: Callable[[], float] = staticmethod(w.wall_clock_ms)  # type: ignore[assignment]
    _manager: w.WindowManager | None = None

    def process_window(self, window: w.Window) -> None:
        """Handle one window: ``window.get()/.get_new()/.get_expired()``, ``start/end_timestamp``."""

    # ------------------------------------------------------------ engine side (executor thread)
    def make_driver(self, task: BoltOutputCollector) -> Driver:
        """Tuples are held (no auto-ack) until the window manager expires them."""
        return TupleDriver(task, self, auto_ack=False)

    @property
    def timer_interval_secs(self) -> float | None:  # type: ignore[override]
        """What the window needs (a value the user assigns wins)."""
        assigned = getattr(self, "_timer_interval_secs", _UNSET)   # not vars(self): see Component._attach
        if assigned is not _UNSET:
            return assigned
        spec = self._window_spec()
        if spec is None:
            return None
        periods = [spec.watermark_interval_ms / 1000.0] if spec.is_event_time else []
        periods += [x.ms / 1000.0 for x in (spec.sliding,) if isinstance(x, w.Duration)]
        return min([_MAX_TIMER_SECS] + [p / 4 for p in periods]) if periods else None

    @timer_interval_secs.setter
    def timer_interval_secs(self, value: float | None) -> None:
        self._timer_interval_secs = value

    def _window_spec(self) -> w.WindowSpec | None:
        spec = spec_from_opts(self._window_opts)
        conf = getattr(self, "_stormpy_conf", None)
        if spec is None and conf is not None:
            spec = w.spec_from_conf(conf)
        return spec

    def _window_manager(self) -> w.WindowManager:
        manager = self._manager
        if manager is not None:
            return manager
        spec = self._window_spec()
        conf = getattr(self, "_stormpy_conf", None) or {}
        if spec is None:
            raise ValueError(f"windowed bolt {type(self).__name__} declared no window: call "
                             "with_window(...) or with_tumbling_window(...) in the class, on the instance or in initialize")
        problem = w.validate_timeout(spec, float(cfg.read(conf, cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS)),
                                     conf.get(cfg.TOPOLOGY_MAX_SPOUT_PENDING.name))
        if problem:
            raise ValueError(problem)
        if spec.late_stream is not None and spec.late_stream not in self._declared_streams():
            raise ValueError(f"late tuple stream {spec.late_stream!r} is not declared in {type(self).__name__}.outputs")
        self._manager = manager = w.WindowManager(spec, self._on_activation, self._on_expiry, self.clock)
        return manager

    def _declared_streams(self) -> set[str]:
        context = getattr(self, "_stormpy_context", None)
        plan = getattr(context, "_plan", None)
        if plan is not None:   # what the topology declared, whatever ``self.outputs`` holds now
            return set(plan.components[context.component_id].streams)
        from stormpy.api.dsl import normalize_outputs

        return set(normalize_outputs(type(self).outputs))

    def process(self, tup: Tuple) -> None:
        manager = self._window_manager()
        spec = manager.spec
        if not spec.is_event_time:
            manager.add(tup)
            return
        ts = getattr(tup.values, spec.timestamp_field, None)  # type: ignore[arg-type]
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            raise ValueError(f"tuple from {tup.component!r} on stream {tup.stream!r} has no numeric "
                             f"timestamp field {spec.timestamp_field!r}: {tup.values!r}")
        if manager.add(tup, ts_ms=ts, stream=(tup.component, tup.stream)):
            return
        self.metrics.incr("late_tuples")
        if spec.late_stream is not None:
            self.emit(list(tup.values), stream=spec.late_stream, anchors=[tup])
        else:
            self._fw_logger().info("late tuple dropped (timestamp %s < watermark %s): %r", ts, manager.watermark, tup.values)
        self.ack(tup)

    def on_timer(self) -> None:
        self._window_manager().tick()

    def _on_activation(self, window: w.Window) -> None:
        with self.anchored(window.get()):
            self.process_window(window)

    def _on_expiry(self, tups: list[Tuple]) -> None:
        for tup in tups:
            self.ack(tup)
