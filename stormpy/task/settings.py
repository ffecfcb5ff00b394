"""ExecutorSettings: the typed configuration executors, the acker and the transport read.

Built once per executor (and once per worker transport) from a topology or component
config, through the ``Key`` declarations of ``stormpy.config``: each value is coerced by its
key and a missing or null value takes the key's declared default, so no caller keeps a
fallback of its own that could disagree with ``config.py``. Frozen: executor threads read it
without locks.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stormpy import config as cfg

log = logging.getLogger(__name__)

# The share of the receive buffer at which an executor reports itself overloaded, and below
# which it stops doing so (hysteresis, so backpressure does not flap at one boundary).
_HIGH_WATERMARK = 0.9
_LOW_WATERMARK = 0.5


@dataclass(frozen=True)
class ExecutorSettings:
    """What an executor needs from its component's config, typed and with units in the names."""

    transfer_batch_size: int            # messages per hand-over batch (>= 1)
    flush_interval_secs: float          # partly filled batches leave after this long
    receive_buffer_size: int
    high_watermark: int                 # queued tuples above which the executor is overloaded
    low_watermark: int                  # ... and below which it no longer is
    restart_backoff_secs: float         # first pause before a crashed task is re-created
    sample_every: int                   # one tuple in this many has its latency measured
    debug: bool                         # log every emitted tuple
    tick_freq_secs: float | None        # tick tuples for bolts, None: no ticks
    max_spout_pending: int              # trees in flight per spout task, 0: unbounded
    spout_wait_secs: float              # spout sleep when it emitted nothing or is throttled
    message_timeout_secs: float         # a tuple tree not completed in this time fails
    message_timeouts_enabled: bool
    backpressure_enabled: bool

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "ExecutorSettings":
        """Read every setting through its declared Key (raises ConfigError on a bad value)."""
        buffer = max(1, int(cfg.read(conf, cfg.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE)))
        rate = float(cfg.read(conf, cfg.TOPOLOGY_STATS_SAMPLE_RATE))
        tick = cfg.read(conf, cfg.TOPOLOGY_TICK_TUPLE_FREQ_SECS)
        return cls(
            transfer_batch_size=max(1, int(cfg.read(conf, cfg.TOPOLOGY_TRANSFER_BATCH_SIZE))),
            flush_interval_secs=max(0.0, cfg.read(conf, cfg.TOPOLOGY_BATCH_FLUSH_INTERVAL_MILLIS) / 1000.0),
            receive_buffer_size=buffer,
            high_watermark=max(1, int(buffer * _HIGH_WATERMARK)),
            low_watermark=max(0, int(buffer * _LOW_WATERMARK)),
            restart_backoff_secs=max(0.0, float(cfg.read(conf, cfg.TOPOLOGY_TASK_RESTART_BACKOFF_SECS))),
            # at most 1 << 30: the compiled receive loop counts down in a C integer (drivers.pxd)
            sample_every=min(max(1, int(round(1.0 / rate))), 1 << 30) if rate > 0 else 1 << 30,
            debug=bool(cfg.read(conf, cfg.TOPOLOGY_DEBUG)),
            tick_freq_secs=float(tick) if tick else None,
            max_spout_pending=max(0, int(cfg.read(conf, cfg.TOPOLOGY_MAX_SPOUT_PENDING) or 0)),
            spout_wait_secs=max(0.0001, cfg.read(conf, cfg.TOPOLOGY_SLEEP_SPOUT_WAIT_MS) / 1000.0),
            message_timeout_secs=max(0.001, float(cfg.read(conf, cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS))),
            message_timeouts_enabled=bool(cfg.read(conf, cfg.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS)),
            backpressure_enabled=bool(cfg.read(conf, cfg.TOPOLOGY_BACKPRESSURE_ENABLE)),
        )
