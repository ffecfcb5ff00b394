"""Write one batch's Arrow table as the files Spark's own writer would make, without a Spark job.

Why: each Spark write costs a job (~0.1-0.2 s of fixed cost on a small machine, plus the JVM's
threads competing with the executors for the same cores), and with SparkState or the sink on
the embedded ``local[*]`` Spark that write was the critical path of the whole topology. For the
plain file formats on a path of this machine's filesystem, pyarrow writes the same files in
C++ from the Arrow table the converter already made: Parquet through pyarrow's dataset writer,
JSON as JSON lines (Spark's JSON source format), each ``partition_by`` column as a Hive-style
``col=value`` directory with the column dropped from the data files, as Spark does. No
SparkSession is started for such writes at all; ``spark.read`` of the output sees the same
rows and columns as if Spark had written them. The staged files are published by the same
idempotent renames (``stormpy.spark.idempotent``) as Spark's.

When the Arrow writer is used is decided once per output (``use_arrow_writer``), by the
``spark.state.writer`` / ``spark.sink.writer`` key: ``auto`` (the default) picks it for
Parquet or JSON on a local path with the embedded Spark and no writer options, ``arrow``
demands it (a config error where it cannot apply), ``spark`` always writes through Spark.
Columns whose values Spark would read back differently from Arrow's file types (timestamps:
Spark 4 reads a zone-less Parquet timestamp as TIMESTAMP_NTZ; binary in JSON) make ``auto``
fall back to Spark for that output. Called from one writer thread per output partition.
"""
from __future__ import annotations

import base64
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from stormpy import config as cfg
from stormpy.config import ConfigError

log = logging.getLogger(__name__)

WRITERS = ("auto", "arrow", "spark")
ARROW_FORMATS = ("parquet", "json")
#: Spark's name for a null partition value's directory (``col=__HIVE_DEFAULT_PARTITION__``).
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_PARQUET_OPTIONS = {"compression"}   # writer options the Arrow path understands (Parquet)


def _is_embedded(conf: Mapping[str, Any]) -> bool:
    """Whether the process's Spark would be the embedded local one (no cluster, no Connect)."""
    master = cfg.read(conf, cfg.SPARK_MASTER)
    return not conf.get("spark.remote") and isinstance(master, str) and master.startswith("local")


def _is_local_path(path: str | None) -> bool:
    return bool(path) and ("://" not in path or path.startswith("file:"))


def use_arrow_writer(conf: Mapping[str, Any], key: str, *, fmt: str, path: str | None,
                     options: Mapping[str, Any] | None, table: str | None = None) -> bool:
    """Whether an output is written by pyarrow (True) or by a Spark job (False).

    ``key`` is the config key that chooses (``spark.state.writer`` or ``spark.sink.writer``).
    Raises ConfigError for an unknown choice, or ``arrow`` where the Arrow writer cannot apply.
    """
    choice = str(conf.get(key) or "auto").lower()
    if choice not in WRITERS:
        raise ConfigError(f"config key {key!r} must be one of {', '.join(WRITERS)}, got {choice!r}")
    if choice == "spark":
        return False
    reasons = []
    if table is not None or not _is_local_path(path):
        reasons.append("it writes only to a path on this machine's filesystem (not a table or a remote URL)")
    if fmt not in ARROW_FORMATS:
        reasons.append(f"it writes only {' and '.join(ARROW_FORMATS)} (format is {fmt!r})")
    extra = set(options or {}) - (_PARQUET_OPTIONS if fmt == "parquet" else set())
    if extra:
        reasons.append(f"it does not take the writer options {', '.join(sorted(extra))}")
    if not _is_embedded(conf):
        reasons.append("Spark runs on a cluster or through Spark Connect here, and the files must be written there")
    if choice == "arrow" and reasons:
        raise ConfigError(f"{key}: arrow cannot be used: {'; '.join(reasons)}")
    return not reasons


def arrow_compatible(schema: pa.Schema, fmt: str) -> str | None:
    """Why Spark would read this table's columns back differently from Arrow's files (None: it would not)."""
    for field in schema:
        kind = field.type
        if pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_time(kind):
            return f"column {field.name!r} is {kind} (Spark's own writer decides its time zone handling)"
        if pa.types.is_decimal(kind) or pa.types.is_dictionary(kind) or pa.types.is_duration(kind):
            return f"column {field.name!r} is {kind}"
        if fmt == "json" and not _json_plain(kind):
            return f"column {field.name!r} is {kind}, which Spark's JSON writer encodes its own way"
    return None


def _json_plain(kind: pa.DataType) -> bool:
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _json_plain(kind.value_type)
    if pa.types.is_struct(kind):
        return all(_json_plain(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return pa.types.is_string(kind.key_type) and _json_plain(kind.item_type)
    return (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
            or pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind))


def _partition_value(value: Any) -> str:
    """A partition directory's value as Spark spells it (``ExternalCatalogUtils.escapePathName``)."""
    if value is None:
        return NULL_PARTITION
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if text == "":
        return NULL_PARTITION
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED or ord(c) < 0x20 or ord(c) == 0x7F else c for c in text)


# The characters Spark's escapePathName escapes in a partition value.
_ESCAPED = set('"#%\'*/:=?\\{}[]^')


def _json_value(value: Any) -> Any:
    """Spark's JSON writer spells NaN and infinities as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _drop_nulls(row: dict[str, Any]) -> dict[str, Any]:
    """Spark's JSON writer leaves null fields out (``ignoreNullFields`` defaults to true)."""
    return {k: _json_value(v) for k, v in row.items() if v is not None}


def _write_file(table: pa.Table, fmt: str, path: str, options: Mapping[str, Any]) -> None:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        compression = str(options.get("compression", "snappy"))
        pq.write_table(table, path, compression=None if compression == "none" else compression)
        return
    with open(path, "w", encoding="utf-8") as handle:
        for row in table.to_pylist():
            handle.write(json.dumps(_drop_nulls(row), ensure_ascii=False, separators=(",", ":")))
            handle.write("\n")


def _file_name(fmt: str, options: Mapping[str, Any], index: int) -> str:
    if fmt == "json":
        return f"part-{index:05d}.json"
    compression = str(options.get("compression", "snappy"))
    middle = "" if compression in ("none", "uncompressed") else f".{compression}"
    return f"part-{index:05d}{middle}.parquet"


def write_table(table: pa.Table, directory: str, fmt: str, partition_by: Sequence[str] = (),
                options: Mapping[str, Any] | None = None) -> list[str]:
    """Write ``table`` into the new directory ``directory`` as Spark would; returns the files (relative).

    One file per output directory (the whole batch, or each ``partition_by`` value set), like
    SparkState's ``coalesce(1)`` write. Empty tables write nothing.
    """
    options = dict(options or {})
    os.makedirs(directory, exist_ok=False)
    if table.num_rows == 0:
        return []
    if not partition_by:
        name = _file_name(fmt, options, 0)
        _write_file(table, fmt, os.path.join(directory, name), options)
        return [name]
    missing = [c for c in partition_by if c not in table.column_names]
    if missing:
        raise ConfigError(f"partition_by names columns the batch does not have: {', '.join(missing)}")
    data_columns = [c for c in table.column_names if c not in partition_by]
    groups = table.group_by(list(partition_by), use_threads=False).aggregate([]) if partition_by else None
    written = []
    keys = [tuple(row[c] for c in partition_by) for row in groups.to_pylist()]
    import pyarrow.compute as pc

    for index, key in enumerate(keys):
        mask = None
        for column, value in zip(partition_by, key):
            term = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
            mask = term if mask is None else pc.and_(mask, term)
        part = table.filter(mask).select(data_columns)
        relative_dir = "/".join(f"{c}={_partition_value(v)}" for c, v in zip(partition_by, key))
        os.makedirs(os.path.join(directory, relative_dir), exist_ok=True)
        name = f"{relative_dir}/{_file_name(fmt, options, index)}"
        _write_file(part, fmt, os.path.join(directory, name), options)
        written.append(name)
    return written


HANDOVERS = ("auto", "parquet", "arrow")
HANDOVER_FILE = "part-00000.parquet"


def use_parquet_handover(conf: Mapping[str, Any], key: str, *, shared_path: bool, table: str | None) -> bool:
    """Whether a Spark job's input goes through a staged Parquet file (True) or as Arrow rows.

    Why: through Spark Connect the rows of a ``createDataFrame`` travel inside the plan and the
    server's driver turns them into a ``LocalRelation`` (~4 us per row measured, on the CPU
    the executors need); a Parquet file written by pyarrow next to the output is read by the
    executors' vectorized reader instead (-34% JVM CPU measured). It needs the output to be a
    path this worker writes with plain file calls and every executor sees (``shared_path``):
    SparkState through Connect requires that already; SparkSinkBolt's built-in writer appending to
    such a path uses it too (``choose_handover``). ``auto`` picks it when Spark is not the
    embedded local one; tables keep the Arrow hand-over (their location is known only once the
    table exists). Raises ConfigError for an unknown choice or ``parquet`` where it cannot apply.
    """
    choice = str(conf.get(key) or "auto").lower()
    if choice not in HANDOVERS:
        raise ConfigError(f"config key {key!r} must be one of {', '.join(HANDOVERS)}, got {choice!r}")
    if choice == "arrow":
        return False
    fits = shared_path and table is None
    if choice == "parquet" and not fits:
        raise ConfigError(f"{key}: parquet needs a SparkState path on this worker's filesystem (a local disk or a "
                          "shared mount every Spark executor sees), not a table or a remote URL")
    return fits and (choice == "parquet" or not _is_embedded(conf))


def handover_compatible(schema: pa.Schema) -> str | None:
    """Why Spark would read this table's columns from Parquet as other types than from Arrow rows
    (None: it reads the same ones)."""
    for field in schema:
        kind = field.type
        if pa.types.is_unsigned_integer(kind) or pa.types.is_null(kind) or pa.types.is_large_binary(kind):
            return f"column {field.name!r} is {kind}"
    return arrow_compatible(schema, "parquet")


def write_handover(table: pa.Table, directory: str) -> None:
    """Write ``table`` as one uncompressed Parquet file into the new directory ``directory``.

    Uncompressed and without dictionary encoding: the file lives for one Spark job on the same
    machine or mount, so encoding it smaller costs the worker CPU that nothing gets back.
    """
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=False)
    pq.write_table(table, os.path.join(directory, HANDOVER_FILE), compression="NONE", use_dictionary=False)


def choose_handover(conf: Mapping[str, Any], key: str, schema: pa.Schema, *, shared_path: bool,
                    table: str | None, who: str) -> bool:
    """Decide, once per output, whether its Spark jobs read staged Parquet (``use_parquet_handover``)
    given the first batch's Arrow ``schema`` (``handover_compatible``); logs the choice for ``who``."""
    chosen = use_parquet_handover(conf, key, shared_path=shared_path, table=table)
    unfit = handover_compatible(schema) if chosen else None
    if unfit is not None:
        log.info("%s: rows handed to Spark as Arrow, not Parquet: %s", who, unfit)
        chosen = False
    log.info("%s: Spark jobs take their rows %s", who,
             "from staged Parquet files" if chosen else "as Arrow record batches")
    return chosen


def handover_dataframe(spark: Any, table: pa.Table, schema: Any, directory: str, uri: str | None = None) -> Any:
    """Write ``table`` into the new directory ``directory`` (``write_handover``) and return a
    DataFrame that reads it (``uri``: how Spark names the directory, default the same path).

    ``schema`` (a StructType; None: derived from the table as ``createDataFrame`` would) is given
    to the reader, so Spark neither lists the file's footer for it nor reads other types than
    the Arrow hand-over would give. The caller removes ``directory`` once the job is done (also
    when it failed, or when this raised).
    """
    write_handover(table, directory)
    if schema is None:
        from pyspark.sql.pandas.types import from_arrow_schema
        schema = from_arrow_schema(table.schema, prefer_timestamp_ntz=False)
    return spark.read.schema(schema).parquet(uri or directory)
