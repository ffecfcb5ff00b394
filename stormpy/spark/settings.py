"""The Spark sink's settings: read once from the component config and validated before any batch.

Pure Python without a PySpark import, so topology validation and tests can use it cheaply.
Precedence for every setting: a value set in the config (topology config <- component config
<- ``-c``) wins over a class attribute of the ``SparkSinkBolt`` subclass, which wins over the
default. ``spark.sink.batch.size`` and ``spark.sink.batch.secs`` always have a value in a
merged config (their defaults), so for those two a subclass attribute applies while the config
still holds the default.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stormpy import config as cfg
from stormpy.config import ConfigError

log = logging.getLogger(__name__)

DOCUMENTED_FORMATS = ("parquet", "json", "csv", "orc")
SAVE_MODES = ("append", "overwrite", "ignore", "error", "errorifexists")


@dataclass(frozen=True)
class SinkSettings:
    """How a sink batches and where its built-in writer puts each batch.

    ``schema`` is kept as given (a DDL string or a ``StructType``): a DDL string is parsed
    by Spark once the session exists.
    """

    batch_size: int
    batch_secs: float
    format: str = "parquet"
    #: Batches handed to the writer thread and not yet finished; 0 = write on the executor thread.
    max_inflight_batches: int = 2
    path: str | None = None
    mode: str = "append"
    partition_by: tuple[str, ...] = ()
    table: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    schema: Any = None

    @property
    def has_writer(self) -> bool:
        """Whether a built-in writer is configured (a path or a table)."""
        return bool(self.path or self.table)

    def describe(self) -> str:
        target = f"table {self.table}" if self.table else f"{self.format} at {self.path}"
        return f"{target} (mode {self.mode})" if self.has_writer else "handle_batch"


def _is_set(value: Any) -> bool:
    return value is not None and value != ""


def _pick(conf: Mapping[str, Any], key: cfg.Key, attr: Any, default: Any) -> Any:
    """Config value (if set and not merely the key's default) > class attribute > default."""
    value = conf.get(key.name)
    if _is_set(value) and (value != key.default or not _is_set(attr)):
        return key.coerce(value)
    if _is_set(attr):
        return attr
    return default


def _partition_columns(value: Any) -> tuple[str, ...]:
    if not _is_set(value):
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"config key 'spark.sink.partition.by' must be a list of column names, got {value!r}")


def _writer_options(value: Any) -> dict[str, str]:
    if not _is_set(value):
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"config key 'spark.sink.options' must be a mapping, got {value!r}")
    return {str(k): ("true" if v is True else "false" if v is False else str(v)) for k, v in value.items()}


def check_batch_timing(conf: Mapping[str, Any], batch_secs: float) -> None:
    """Refuse a batch interval longer than the message timeout: those tuples would time out
    (and be replayed) while still waiting in their batch, so the sink would write duplicates."""
    if not cfg.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS.coerce(conf.get(cfg.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS.name, True)):
        return
    timeout = cfg.read(conf, cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS)
    if batch_secs > float(timeout):
        raise ConfigError(f"spark.sink.batch.secs ({batch_secs:g}) is larger than topology.message.timeout.secs "
                          f"({timeout}); tuples would time out before their batch is written. Lower "
                          "spark.sink.batch.secs or raise topology.message.timeout.secs")


def sink_settings(conf: Mapping[str, Any], attrs: Mapping[str, Any] | None = None) -> SinkSettings:
    """Build and validate a sink's settings from its merged config and its class attributes.

    ``attrs`` holds the subclass's own values for ``batch_size``, ``secs_between_batches``,
    ``format``, ``path``, ``mode``, ``partition_by``, ``table``, ``options``, ``schema`` and
    ``max_inflight_batches``.
    Raises ``ConfigError`` naming the key at fault.
    """
    attrs = attrs or {}
    batch_size = _pick(conf, cfg.SPARK_SINK_BATCH_SIZE, attrs.get("batch_size"), cfg.SPARK_SINK_BATCH_SIZE.default)
    batch_secs = _pick(conf, cfg.SPARK_SINK_BATCH_SECS, attrs.get("secs_between_batches"),
                       cfg.SPARK_SINK_BATCH_SECS.default)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(f"spark.sink.batch.size must be a positive integer, got {batch_size!r}")
    if not isinstance(batch_secs, (int, float)) or isinstance(batch_secs, bool) or batch_secs <= 0:
        raise ConfigError(f"spark.sink.batch.secs must be a positive number of seconds, got {batch_secs!r}")
    check_batch_timing(conf, float(batch_secs))
    inflight = _pick(conf, cfg.SPARK_SINK_MAX_INFLIGHT_BATCHES, attrs.get("max_inflight_batches"),
                     cfg.SPARK_SINK_MAX_INFLIGHT_BATCHES.default)
    if not isinstance(inflight, int) or isinstance(inflight, bool) or inflight < 0:
        raise ConfigError(f"spark.sink.max.inflight.batches must be an integer >= 0, got {inflight!r}")
    settings = SinkSettings(
        batch_size=batch_size,
        batch_secs=float(batch_secs),
        max_inflight_batches=inflight,
        format=str(_pick(conf, cfg.SPARK_SINK_FORMAT, attrs.get("format"), "parquet")).lower(),
        path=_pick(conf, cfg.SPARK_SINK_PATH, attrs.get("path"), None),
        mode=str(_pick(conf, cfg.SPARK_SINK_MODE, attrs.get("mode"), "append")).lower(),
        partition_by=_partition_columns(_pick(conf, cfg.SPARK_SINK_PARTITION_BY, attrs.get("partition_by"), None)),
        table=_pick(conf, cfg.SPARK_SINK_TABLE, attrs.get("table"), None),
        options=_writer_options(_pick(conf, cfg.SPARK_SINK_OPTIONS, attrs.get("options"), None)),
        schema=_pick(conf, cfg.SPARK_SINK_SCHEMA, attrs.get("schema"), None),
    )
    _check_writer(settings)
    return settings


def _check_writer(settings: SinkSettings) -> None:
    if settings.path and settings.table:
        raise ConfigError(f"the Spark sink has both spark.sink.path ({settings.path!r}) and spark.sink.table "
                          f"({settings.table!r}); set only one")
    if settings.mode not in SAVE_MODES:
        raise ConfigError(f"spark.sink.mode must be one of {', '.join(SAVE_MODES)}, got {settings.mode!r}")
    if settings.mode != "append" and settings.has_writer:
        log.warning("Spark sink writes with mode %r: each batch replaces or skips what earlier batches wrote",
                    settings.mode)
    if not settings.format:
        raise ConfigError("spark.sink.format must name a Spark data source, e.g. parquet")
    if settings.format not in DOCUMENTED_FORMATS and settings.has_writer:
        log.info("Spark sink format %r is not one of %s; handing it to Spark as a data source name",
                 settings.format, "/".join(DOCUMENTED_FORMATS))
