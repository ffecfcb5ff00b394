"""Every configuration key stormpy reads: name, default, type and a one-line doc.

Keys keep Apache Storm's names so an existing ``storm.yaml`` carries over. A ``Config`` is
built once (defaults <- YAML file <- ``-c key=value`` overrides <- topology config) and passed
to daemons as an object; nothing reads configuration from globals. Unknown keys are kept as
they are: topologies carry their users' own keys to components as ``stormconf``.
"""
from __future__ import annotations

import copy
import ipaddress
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration value or file that cannot be used; the message names the key."""


@dataclass(frozen=True)
class Key:
    name: str
    default: Any
    type: type | tuple[type, ...] | None
    doc: str

    def coerce(self, value: Any) -> Any:
        """Return ``value`` as this key's type, or raise ConfigError naming the key."""
        if value is None or self.type is None:
            return value
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
            return value
        for t in types:
            try:
                if t is bool and isinstance(value, str):
                    if value.lower() in ("true", "yes", "1"):
                        return True
                    if value.lower() in ("false", "no", "0"):
                        return False
                    continue
                if t in (int, float) and isinstance(value, (int, float, str)) and not isinstance(value, bool):
                    return t(value)
                if t is str and isinstance(value, (int, float)):
                    return str(value)
                if t is list and isinstance(value, (tuple, set)):
                    return list(value)
            except (TypeError, ValueError):
                continue
        names = "/".join(t.__name__ for t in types)
        raise ConfigError(f"config key {self.name!r} must be {names}, got {value!r}")


KEYS: dict[str, Key] = {}


def read(conf: Mapping[str, Any] | None, key: Key) -> Any:
    """``conf[key]`` coerced by its declaration; a missing or null value (or no ``conf``) is the
    declared default. Code outside this module reads keys only through this (or a ``Config``),
    so no caller keeps a fallback of its own that could disagree with the declaration."""
    value = conf.get(key.name) if conf is not None else None
    if value is None:
        return copy.copy(key.default)
    return key.coerce(value)


def _key(name: str, default: Any, type_: type | tuple[type, ...] | None, doc: str) -> Key:
    key = Key(name, default, type_, doc)
    KEYS[name] = key
    return key


# ---------------------------------------------------------------- ZooKeeper
STORM_ZOOKEEPER_SERVERS = _key("storm.zookeeper.servers", ["localhost"], list, "ZooKeeper hosts.")
STORM_ZOOKEEPER_PORT = _key("storm.zookeeper.port", 2181, int, "ZooKeeper client port.")
STORM_ZOOKEEPER_ROOT = _key("storm.zookeeper.root", "/storm", str, "Chroot under which all cluster state lives.")
STORM_ZOOKEEPER_SESSION_TIMEOUT = _key("storm.zookeeper.session.timeout", 20000, int,
                                       "ZooKeeper session timeout, ms. Also how long a Nimbus waits for another "
                                       "Nimbus that stops answering during a code copy (60 s at most), so a "
                                       "standby whose leader's host vanished mid-copy can take over.")
STORM_ZOOKEEPER_CONNECTION_TIMEOUT = _key("storm.zookeeper.connection.timeout", 15000, int, "ZooKeeper connect timeout, ms.")
STORM_ZOOKEEPER_RETRY_TIMES = _key("storm.zookeeper.retry.times", 5, int, "Retries of a failed ZooKeeper operation.")
STORM_ZOOKEEPER_RETRY_INTERVAL = _key("storm.zookeeper.retry.interval", 1000, int, "First retry delay, ms.")
TRANSACTIONAL_ZOOKEEPER_ROOT = _key("transactional.zookeeper.root", "/transactional", str, "Root of Trident coordinator state, one subtree per topology name.")
TRANSACTIONAL_ZOOKEEPER_SERVERS = _key("transactional.zookeeper.servers", None, list, "ZooKeeper hosts for Trident state; default: storm.zookeeper.servers.")
TRANSACTIONAL_ZOOKEEPER_PORT = _key("transactional.zookeeper.port", None, int, "ZooKeeper port for Trident state; default: storm.zookeeper.port.")
DEV_ZOOKEEPER_PATH = _key("dev.zookeeper.path", "/tmp/dev-storm-zookeeper", str, "Data dir of `stormpy dev-zookeeper`.")
DEV_ZOOKEEPER_HOME = _key("dev.zookeeper.home", None, str, "A ZooKeeper distribution (its ``lib/*.jar``) for `stormpy dev-zookeeper`; unset: ``$ZOOKEEPER_HOME``, else the jars inside the pyspark wheel (the ``spark`` extra).")

# ---------------------------------------------------------------- local machine
STORM_LOCAL_DIR = _key("storm.local.dir", "storm-local", str, "Where daemons keep code, local state and uploads.")
STORM_LOG_DIR = _key("storm.log.dir", "logs", str, "Daemon logs; workers log under workers-artifacts/<id>/<port>/.")
STORM_LOCAL_HOSTNAME = _key("storm.local.hostname", None, str, "Hostname to advertise; default: this machine's name.")

# ---------------------------------------------------------------- Nimbus
NIMBUS_SEEDS = _key("nimbus.seeds", ["localhost"], list, "Hosts where clients look for Nimbus.")
NIMBUS_HOST = _key("nimbus.host", None, str, "Old single-Nimbus key; used when nimbus.seeds is not set.")
NIMBUS_THRIFT_PORT = _key("nimbus.thrift.port", 6627, int, "Nimbus Thrift port.")
NIMBUS_THRIFT_MAX_BUFFER_SIZE = _key("nimbus.thrift.max_buffer_size", 1048576 * 32, int, "Largest Thrift frame Nimbus accepts, bytes.")
NIMBUS_TASK_TIMEOUT_SECS = _key("nimbus.task.timeout.secs", 30, int, "Reassign executors whose heartbeat is older than this.")
NIMBUS_TASK_LAUNCH_SECS = _key("nimbus.task.launch.secs", 120, int, "Grace period for executors that were just assigned.")
NIMBUS_SUPERVISOR_TIMEOUT_SECS = _key("nimbus.supervisor.timeout.secs", 60, int, "A supervisor silent this long is dead.")
NIMBUS_MONITOR_FREQ_SECS = _key("nimbus.monitor.freq.secs", 10, int, "How often Nimbus checks heartbeats and reassigns.")
NIMBUS_CLEANUP_INBOX_FREQ_SECS = _key("nimbus.cleanup.inbox.freq.secs", 600, int, "How often old uploads are deleted.")
NIMBUS_INBOX_JAR_EXPIRATION_SECS = _key("nimbus.inbox.jar.expiration.secs", 3600, int, "Age after which an upload is deleted.")
NIMBUS_FILE_COPY_EXPIRATION_SECS = _key("nimbus.file.copy.expiration.secs", 600, int, "An idle upload/download stream is dropped after this.")
NIMBUS_CODE_SYNC_FREQ_SECS = _key("nimbus.code.sync.freq.secs", 120, int,
                                  "How often a standby Nimbus copies missing topology code from the leader.")
NIMBUS_LEADER_WAIT_SECS = _key("nimbus.leader.wait.secs", 60, int,
                               "How long a ``stormpy`` command waits for a leader Nimbus when the Nimbus "
                               "daemons answer but none leads yet (a failover, or a restarted Nimbus waiting "
                               "for its predecessor's ZooKeeper session to expire); it prints one line that "
                               "it waits. 0 fails at once.")
NIMBUS_FILE_UPLOAD_MAX_BYTES = _key("nimbus.file.upload.max.bytes", 256 * 1024 * 1024, int, "Largest accepted topology upload.")

# ---------------------------------------------------------------- supervisor
SUPERVISOR_SLOTS_PORTS = _key("supervisor.slots.ports", [6700, 6701, 6702, 6703], list, "Worker ports of this supervisor.")
SUPERVISOR_HEARTBEAT_FREQUENCY_SECS = _key("supervisor.heartbeat.frequency.secs", 5, int, "How often SupervisorInfo is written.")
SUPERVISOR_MONITOR_FREQUENCY_SECS = _key("supervisor.monitor.frequency.secs", 3, int, "How often worker processes are checked.")
SUPERVISOR_WORKER_TIMEOUT_SECS = _key("supervisor.worker.timeout.secs", 30, int, "Kill a worker whose local heartbeat is older than this.")
SUPERVISOR_WORKER_START_TIMEOUT_SECS = _key("supervisor.worker.start.timeout.secs", 120, int, "Kill a worker that has not heartbeated this long after launch.")
SUPERVISOR_WORKER_SHUTDOWN_SLEEP_SECS = _key("supervisor.worker.shutdown.sleep.secs", 3, int, "SIGTERM grace period before SIGKILL.")
SUPERVISOR_SYNC_FREQ_SECS = _key("supervisor.sync.freq.secs", 10, int, "How often assignments are synced without a watch firing.")
SUPERVISOR_PIP_INDEX_URL = _key("supervisor.pip.index.url", None, str, "Package index for topologies' requirements (``stormpy submit -r``); unset: pip's own configuration on the supervisor host.")
SUPERVISOR_PIP_NO_INDEX = _key("supervisor.pip.no.index", False, bool, "Install topologies' requirements only from the wheels uploaded with them (``stormpy submit --wheels``), never from an index.")
SUPERVISOR_PIP_TIMEOUT_SECS = _key("supervisor.pip.timeout.secs", 300, int, "Longest a topology's virtualenv may take to build; past it the install counts as failed.")
SUPERVISOR_PIP_RETRY_SECS = _key("supervisor.pip.retry.secs", 60, int, "Wait after a failed requirements install before trying again (the failure is a topology error meanwhile).")

# ---------------------------------------------------------------- worker / task
WORKER_HEARTBEAT_FREQUENCY_SECS = _key("worker.heartbeat.frequency.secs", 1, int, "How often a worker writes its local heartbeat.")
WORKER_CHILDOPTS = _key("worker.childopts", None, (str, list), "Extra interpreter options for worker processes.")
TASK_HEARTBEAT_FREQUENCY_SECS = _key("task.heartbeat.frequency.secs", 3, int, "How often executor stats reach the cluster.")
TASK_REFRESH_POLL_SECS = _key("task.refresh.poll.secs", 10, int, "How often a worker re-reads its assignment without a watch firing.")

# ---------------------------------------------------------------- topology
TOPOLOGY_NAME = _key("topology.name", None, str, "The topology's name (set at submit).")
TOPOLOGY_WORKERS = _key("topology.workers", 1, int, "Worker processes for the topology.")
TOPOLOGY_ACKER_EXECUTORS = _key("topology.acker.executors", None, int, "Acker tasks; None means one per worker, 0 disables tracking.")
TOPOLOGY_MESSAGE_TIMEOUT_SECS = _key("topology.message.timeout.secs", 30, int, "A tuple tree not completed in this time fails.")
TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS = _key("topology.enable.message.timeouts", True, bool, "Whether tuple trees time out.")
TOPOLOGY_MAX_SPOUT_PENDING = _key("topology.max.spout.pending", None, int, "Most pending (un-acked) tuples per spout task.")
TOPOLOGY_TRIDENT_BATCH_EMIT_INTERVAL_MILLIS = _key("topology.trident.batch.emit.interval.millis", 500, int, "Trident: the master batch coordinator starts at most one new batch this often.")
TOPOLOGY_TRIDENT_STATE_ALLOW_HOST_LOCAL = _key("topology.trident.state.allow.host.local", False, bool, "Trident: submit even though a state lives on one host (``SqliteMapState``, a ``SparkState`` path without a scheme or ``file:``) while the cluster has more than one supervisor host, or in one worker's memory (``MemoryMapState``) while the cluster has more than one supervisor host. Set it only when that storage is shared by every host (a path on a mount all hosts see).")
TOPOLOGY_TRIDENT_HOST_LOCAL_STATES = _key("topology.trident.host.local.states", None, list, "Trident: set by the compiler in the component config of each bolt whose state lives on one host or in one process (a list of ``{\"state\": description, \"scope\": \"host\" | \"process\"}``); Nimbus reads it at submit. Not meant to be set by users.")
TOPOLOGY_MAX_TASK_PARALLELISM = _key("topology.max.task.parallelism", None, int, "Cap on any component's parallelism.")
TOPOLOGY_TICK_TUPLE_FREQ_SECS = _key("topology.tick.tuple.freq.secs", None, (int, float), "Send bolts a tick tuple this often.")
TOPOLOGY_DEBUG = _key("topology.debug", False, bool, "Log every emitted tuple.")
TOPOLOGY_SERIALIZERS = _key("topology.serializers", {}, dict, "Type name -> 'module:Class' serializer for non-msgpack values.")
TOPOLOGY_SLEEP_SPOUT_WAIT_MS = _key("topology.sleep.spout.wait.strategy.time.ms", 1, int, "Spout sleep when it emitted nothing or is throttled.")
TOPOLOGY_EXECUTOR_THREADS = _key("topology.executor.threads", "auto", str, "How the executors of one process share threads. ``one``: a single scheduler thread takes the executors in turn (spouts call ``next_tuple``, bolts drain their queues in batches), which saves the thread switches the GIL forces between executor threads; a step that sleeps or blocks holds up the others, so an executor whose step spends more than 50 ms off the CPU (in a cluster worker: a second such step within 10 s), or has not returned after 1 s, moves to a thread of its own; in a cluster worker Trident's coordinators (``$mastercoord-bg0``, ``$spoutcoord-<stream>``: their short steps pace every batch) always run beside the loop on threads of their own. ``per-executor``: a thread per executor (Storm's model; user code that blocks delays only its own executor). ``auto`` (the default): ``one``, in ``stormpy local`` and in cluster workers (fewer GIL hand-offs per batch; measured on the cluster word count, 2 workers on 2 cores, alternating runs: about half the p50 complete latency at the maximum rate and 2-10% fewer CPU-seconds per counted word than a thread per executor; on a machine shared with other busy processes a worker with one busy thread gets a smaller share of the CPU than one with several). A thread that ends by ``sys.exit()`` in user code ends the worker either way (it is restarted).")
TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE = _key("topology.executor.receive.buffer.size", 32768, int, "Tuples an executor may have queued before backpressure.")
TOPOLOGY_TRANSFER_BATCH_SIZE = _key("topology.transfer.batch.size", 1000, int, "Most tuples in one hand-over batch.")
TOPOLOGY_BATCH_FLUSH_INTERVAL_MILLIS = _key("topology.batch.flush.interval.millis", 2, int, "Flush partly filled batches after this long.")
TOPOLOGY_BACKPRESSURE_ENABLE = _key("topology.backpressure.enable", True, bool, "Slow spouts down when receivers fall behind.")
TOPOLOGY_ERROR_RETAIN = _key("topology.error.retain", 10, int, "Newest errors kept per component.")
TOPOLOGY_TASK_RESTART_BACKOFF_SECS = _key("topology.task.restart.backoff.secs", 0.05, (int, float), "Pause before a crashed task is re-created; doubles while it keeps failing to initialize.")
TOPOLOGY_STATS_SAMPLE_RATE = _key("topology.stats.sample.rate", 0.05, float, "Fraction of tuples whose latency is sampled.")
TOPOLOGY_ENVIRONMENT = _key("topology.environment", None, dict, "Extra environment variables for worker processes.")
TOPOLOGY_MODULE = _key("topology.module", None, str, "Module of the topology file (its stem), importable from the code archive's root.")
TOPOLOGY_SUBPROCESS_TIMEOUT_SECS = _key("topology.subprocess.timeout.secs", 30, (int, float), "Multilang (ShellBolt/ShellSpout): seconds a subprocess may leave a handshake, spout command or heartbeat unanswered before its task restarts.")
TOPOLOGY_SUBMITTER_USER = _key("topology.submitter.user", None, str, "Who submitted the topology (set by `stormpy submit`).")
TOPOLOGY_WORKER_CONTROL_TOKEN = _key("topology.worker.control.token", None, str, "Random token Nimbus adds to a topology's config at submit; its workers put it in their control frames (backpressure) and refuse frames without it. Redacted for non-owners.")

# ---------------------------------------------------------------- UI
UI_HOST = _key("ui.host", "0.0.0.0", str, "Address the UI listens on.")
UI_PORT = _key("ui.port", 8080, int, "UI port.")
UI_TIMESERIES_SAMPLE_SECS = _key("ui.timeseries.sample.secs", 10, (int, float), "How often the UI samples every topology's stats for its one-hour charts (page and API requests sample too, every 2 s at most).")

# ---------------------------------------------------------------- Spark sink
SPARK_MASTER = _key("spark.master", "local[*]", str, "Spark master URL; sc://host:port for Spark Connect.")
SPARK_SINK_BATCH_SIZE = _key("spark.sink.batch.size", 10000, int, "Rows per batch handed to Spark.")
SPARK_SINK_BATCH_SECS = _key("spark.sink.batch.secs", 5, (int, float), "Hand a partial batch to Spark after this long.")
SPARK_SINK_MAX_INFLIGHT_BATCHES = _key("spark.sink.max.inflight.batches", 2, int, "Batches a sink task hands to its Spark writer thread before it waits (0: write on the executor thread).")
# Writer keys default to None so that a SparkSinkBolt subclass's class attributes apply unless set here.
SPARK_SINK_FORMAT = _key("spark.sink.format", None, str, "Built-in writer format: parquet (default), json, csv, orc.")
SPARK_SINK_PATH = _key("spark.sink.path", None, str, "Directory the built-in writer appends each batch to.")
SPARK_SINK_MODE = _key("spark.sink.mode", None, str, "Spark save mode of the built-in writer (default append).")
SPARK_SINK_PARTITION_BY = _key("spark.sink.partition.by", None, (list, str), "Columns to partition the output by.")
SPARK_SINK_TABLE = _key("spark.sink.table", None, str, "Write batches with saveAsTable to this table instead of a path.")
SPARK_SINK_SCHEMA = _key("spark.sink.schema", None, str, "Sink schema as a DDL string; default: inferred from the first batch.")
SPARK_STATE_WRITER = _key("spark.state.writer", "auto", str, "Who writes SparkState's files: auto (pyarrow for parquet/json on a local path with the embedded Spark, else Spark), arrow, or spark.")
SPARK_SINK_WRITER = _key("spark.sink.writer", "auto", str, "Who writes the Spark sink's built-in batches: auto (pyarrow for parquet/json on a local path with the embedded Spark, else Spark), arrow, or spark.")
SPARK_STATE_MAX_BATCHES_PER_WRITE = _key("spark.state.max.batches.per.write", 4, int, "Commit groups: how many of a SparkState partition's ready batches one Spark job may write together while the writers are busy (each txid still published, and replaceable, on its own; 1: a job per batch). For a Spark sink whose batches take the Parquet hand-over (spark.state.handover), how many times spark.sink.batch.size rows the batch being filled may grow to while the sink's writer is busy, so that one Spark job writes them.")
SPARK_STATE_HANDOVER = _key("spark.state.handover", "auto", str, "How SparkState, and the Spark sink's built-in writer appending to a path, hand a batch (or commit group) to the Spark job that writes it: parquet (the worker writes it with pyarrow as uncompressed Parquet into a hidden staging directory of the output and the job reads that: less work for Spark's driver than taking Arrow rows in), arrow (the rows travel with the job), or auto (parquet through Spark Connect or a cluster master when the output is a path this worker sees, else arrow). A sink writing a table, or with its own handle_batch, always hands over Arrow rows.")
SPARK_STATE_TEST_DIE_AFTER_WRITE = _key("spark.state.test.die.after.write", None, int, "TEST HOOK, never in production: the first SparkState task to publish this txid SIGKILLs its own worker before the commit completes (once per output).")
SPARK_SINK_OPTIONS = _key("spark.sink.options", None, dict, "Extra writer options, e.g. {header: true} for csv.")


def defaults() -> dict[str, Any]:
    """A fresh dict of every key's default (lists and dicts copied)."""
    return {k.name: json.loads(json.dumps(k.default)) for k in KEYS.values()}


class Config(Mapping[str, Any]):
    """An immutable, validated configuration; index it with a ``Key`` or a key name."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        merged = defaults()
        for name, value in (values or {}).items():
            key = KEYS.get(name)
            merged[name] = key.coerce(value) if key else value
        self._values = merged

    def __getitem__(self, key: Key | str) -> Any:
        return self._values[key.name if isinstance(key, Key) else key]

    def get(self, key: Key | str, default: Any = None) -> Any:  # type: ignore[override]
        return self._values.get(key.name if isinstance(key, Key) else key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def merged(self, values: Mapping[str, Any]) -> "Config":
        """A new Config with ``values`` laid over this one."""
        return Config({**self._values, **values})

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def to_json(self) -> str:
        return json.dumps(self._values, sort_keys=True)


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` from the command line; the value is a YAML scalar or list."""
    if "=" not in text:
        raise ConfigError(f"-c expects key=value, got {text!r}")
    name, raw = text.split("=", 1)
    name = name.strip()
    if not name:
        raise ConfigError(f"-c expects key=value, got {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return name, value


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    return dict(parse_override(item) for item in items)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a storm.yaml; a missing or malformed file is a ConfigError naming it."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys to values")
    return data


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | Iterable[str] = ()) -> Config:
    """Defaults, then the YAML file, then command-line overrides (``key=value`` strings or a dict)."""
    values: dict[str, Any] = {}
    if path:
        values.update(read_yaml(path))
    if isinstance(overrides, Mapping):
        values.update(overrides)
    else:
        values.update(parse_overrides(overrides))
    return Config(values)


def topology_keys(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a config that travels with a topology: everything except daemon-only keys."""
    daemon_prefixes = ("nimbus.", "supervisor.", "ui.", "dev.zookeeper.")
    return {k: v for k, v in conf.items() if not k.startswith(daemon_prefixes)}


# ---------------------------------------------------------------- operations: log viewer, retention, key checks
LOGVIEWER_PORT = _key("logviewer.port", 8000, int, "Port of the supervisor's log viewer (worker logs over HTTP, `stormpy logs`).")
LOGVIEWER_CLEANUP_AGE_MINS = _key("logviewer.cleanup.age.mins", 10080, int, "Delete worker log dirs of topologies gone this long.")
LOGVIEWER_CLEANUP_INTERVAL_SECS = _key("logviewer.cleanup.interval.secs", 600, int, "How often the supervisor looks for old worker logs.")
WORKER_LOG_MAX_BYTES = _key("worker.log.max.bytes", 100 * 1024 * 1024, int, "worker.log rotates at this size (5 old files kept).")

# ---------------------------------------------------------------- hardening and security (issue 10, DESIGN 13)
STORM_MESSAGING_MAX_MESSAGE_BYTES = _key("storm.messaging.max.message.bytes", 8 * 1024 * 1024, int, "Largest frame a worker's receive socket accepts (ZeroMQ MAXMSGSIZE); senders split larger ones.")
NIMBUS_EXECUTORS_PER_TOPOLOGY = _key("nimbus.executors.perTopology", 5000, int, "Most executors (and 10x that many tasks) one topology may have.")
NIMBUS_SLOTS_PER_TOPOLOGY = _key("nimbus.slots.perTopology", 256, int, "Most workers one topology may ask for.")
NIMBUS_TOPOLOGY_CONF_MAX_BYTES = _key("nimbus.topology.conf.max.bytes", 1024 * 1024, int, "Largest accepted topology conf (jsonConf), bytes.")
NIMBUS_TOPOLOGY_CONF_MAX_DEPTH = _key("nimbus.topology.conf.max.depth", 32, int, "Deepest nesting accepted in a topology or component conf.")
NIMBUS_THRIFT_IDLE_TIMEOUT_SECS = _key("nimbus.thrift.idle.timeout.secs", 30, (int, float), "A Thrift connection that sends nothing (or no progress on a frame) this long is closed.")
NIMBUS_THRIFT_MAX_CONNECTIONS = _key("nimbus.thrift.max.connections", 256, int, "Most open Thrift connections; at the cap the longest-idle one is closed, or a new one refused if all are busy.")
NIMBUS_THRIFT_MAX_BUFFERED_BYTES = _key("nimbus.thrift.max.buffered.bytes", 256 * 1024 * 1024, int, "Bytes of unfinished frames Nimbus buffers over all connections.")
STORM_THRIFT_AUTH_SECRET_FILE = _key("storm.thrift.auth.secret.file", None, str, "File holding the shared secret: when set, every Thrift client must authenticate (CLI, UI, supervisors read it too).")
STORM_ZOOKEEPER_AUTH_SCHEME = _key("storm.zookeeper.auth.scheme", "digest", str, "ZooKeeper auth scheme (digest) used with storm.zookeeper.auth.payload.")
STORM_ZOOKEEPER_AUTH_PAYLOAD = _key("storm.zookeeper.auth.payload", None, str, "user:password: when set, every node stormpy creates gets a digest ACL for it only.")
STORM_MESSAGING_CURVE_ENABLE = _key("storm.messaging.curve.enable", False, bool, "Encrypt and authenticate worker-to-worker traffic with ZeroMQ CURVE (one key pair per topology, derived from the shared secret by the supervisors; workers get only their own).")
STORM_ZOOKEEPER_TOPOLOGY_AUTH_PAYLOAD = _key("storm.zookeeper.topology.auth.payload", None, str, "A topology's own ZooKeeper digest identity (``topology-<id>:password``), derived from storm.zookeeper.auth.payload and written by the supervisor into that topology's workers' config only; never set by hand.")
STORM_ZOOKEEPER_SUPERACL = _key("storm.zookeeper.superACL", None, str, "``digest:user:hash``: the daemons' ZooKeeper identity as an ACL id (no password), put on the nodes workers create; default: computed from storm.zookeeper.auth.payload.")
STORM_MESSAGING_CURVE_TOPOLOGY_SECRETKEY = _key("storm.messaging.curve.topology.secretkey", None, str, "A topology's CURVE secret key (Z85), derived by the supervisor from the shared secret and written into that topology's workers' config only (they never see the shared secret); never set by hand.")
SUPERVISOR_RUN_WORKER_AS_USER = _key("supervisor.run.worker.as.user", False, bool, "Run each worker as the OS user named by its topology's ``topology.submitter.user`` (the supervisor must run as root; the user must exist and not be root). The worker's directories and files are then owned by that user, mode 0700/0600.")
SUPERVISOR_WORKER_TLS_CERTFILE = _key("supervisor.worker.tls.certfile", None, str, "Certificate the workers show to ZooKeeper over TLS (storm.zookeeper.ssl.enable), instead of the host's storm.tls.certfile; give it a subject no ACL names.")
SUPERVISOR_WORKER_TLS_KEYFILE = _key("supervisor.worker.tls.keyfile", None, str, "Key of supervisor.worker.tls.certfile (with supervisor.run.worker.as.user the supervisor copies both, and storm.tls.cafile, into each worker's directory for its user).")
UI_AUTH_ENABLE = _key("ui.auth.enable", False, bool, "The UI's mutating actions, configurations and the log viewer need an HTTP basic login from ui.users.file (always on when storm.thrift.auth.secret.file is set).")
UI_USERS_FILE = _key("ui.users.file", None, str, "UI and log viewer logins, 'user:scrypt$...' lines made by `stormpy ui-passwd`; plain passwords are refused.")

# TLS (issue 25): Python's ssl on Nimbus Thrift, the UI, the log viewer and ZooKeeper. A channel's
# own certfile/keyfile/cafile fall back to the storm.tls.* ones (each host's or user's own).
STORM_TLS_CERTFILE = _key("storm.tls.certfile", None, str, "PEM certificate of this host or user: the default of every server's certificate and every client's certificate (made by `stormpy certs`).")
STORM_TLS_KEYFILE = _key("storm.tls.keyfile", None, str, "PEM private key of storm.tls.certfile (readable only by its owner).")
STORM_TLS_CAFILE = _key("storm.tls.cafile", None, str, "PEM CA certificate(s) trusted for peers: the default of every channel's cafile.")
NIMBUS_THRIFT_TLS_ENABLE = _key("nimbus.thrift.tls.enable", False, bool, "Nimbus Thrift over TLS: Nimbus serves only TLS, and every client (CLI, supervisors, UI, Nimbus peers) connects with TLS.")
NIMBUS_THRIFT_TLS_CERTFILE = _key("nimbus.thrift.tls.certfile", None, str, "Nimbus's TLS certificate (default storm.tls.certfile).")
NIMBUS_THRIFT_TLS_KEYFILE = _key("nimbus.thrift.tls.keyfile", None, str, "Nimbus's TLS key (default storm.tls.keyfile).")
NIMBUS_THRIFT_TLS_CAFILE = _key("nimbus.thrift.tls.cafile", None, str, "CA that Nimbus's clients' certificates must chain to (default storm.tls.cafile).")
NIMBUS_THRIFT_TLS_CLIENT_AUTH = _key("nimbus.thrift.tls.client.auth", "none", str, "``required``: a Thrift client must show a certificate from the CA (mutual TLS); its subject CN is the caller's principal, checked against nimbus.admins, nimbus.users and topology.users. ``none``: any TLS client.")
UI_TLS_ENABLE = _key("ui.tls.enable", False, bool, "The UI serves HTTPS only.")
UI_TLS_CERTFILE = _key("ui.tls.certfile", None, str, "The UI's TLS certificate (default storm.tls.certfile).")
UI_TLS_KEYFILE = _key("ui.tls.keyfile", None, str, "The UI's TLS key (default storm.tls.keyfile).")
UI_TLS_CAFILE = _key("ui.tls.cafile", None, str, "CA of the UI's client certificates (default storm.tls.cafile).")
UI_TLS_CLIENT_AUTH = _key("ui.tls.client.auth", "none", str, "``required``: a browser or HTTP client must show a certificate from the CA (mutual TLS); ``optional``: a certificate shown must be from the CA (browsers without one log in).")
LOGVIEWER_TLS_ENABLE = _key("logviewer.tls.enable", False, bool, "The log viewer serves HTTPS only (and `stormpy logs` reads it over HTTPS).")
LOGVIEWER_TLS_CERTFILE = _key("logviewer.tls.certfile", None, str, "The log viewer's TLS certificate (default storm.tls.certfile).")
LOGVIEWER_TLS_KEYFILE = _key("logviewer.tls.keyfile", None, str, "The log viewer's TLS key (default storm.tls.keyfile).")
LOGVIEWER_TLS_CAFILE = _key("logviewer.tls.cafile", None, str, "CA of the log viewer's client certificates (default storm.tls.cafile).")
LOGVIEWER_TLS_CLIENT_AUTH = _key("logviewer.tls.client.auth", "none", str, "``required`` / ``optional`` / ``none``, as ui.tls.client.auth.")
STORM_ZOOKEEPER_SSL_ENABLE = _key("storm.zookeeper.ssl.enable", False, bool, "ZooKeeper over TLS on storm.zookeeper.port (the server's secureClientPort), with storm.tls.certfile/keyfile/cafile; `stormpy dev-zookeeper` then serves only TLS and requires client certificates.")
# Authorization (Storm's SimpleACLAuthorizer keys), enforced when principals are known
# (nimbus.thrift.tls.client.auth: required).
NIMBUS_ADMINS = _key("nimbus.admins", None, list, "Principals (certificate CNs) that may do everything, on every topology.")
NIMBUS_USERS = _key("nimbus.users", None, list, "When set, only these principals (and admins) may use Nimbus at all; unset: any principal may submit and act on its own topologies.")
NIMBUS_GROUPS = _key("nimbus.groups", None, list, "Like nimbus.users, for groups (storm.group.mapping.file or the certificate's OU).")
NIMBUS_SUPERVISOR_USERS = _key("nimbus.supervisor.users", None, list, "Principals of the daemons (supervisors, Nimbus peers, the UI): may download topology code and read every topology, not kill or submit.")
TOPOLOGY_USERS = _key("topology.users", None, list, "Principals besides the submitter (and admins) that may see and operate this topology.")
TOPOLOGY_GROUPS = _key("topology.groups", None, list, "Groups whose members may see and operate this topology.")
STORM_GROUP_MAPPING_FILE = _key("storm.group.mapping.file", None, str, "YAML file mapping each group to its list of principals (``ops: [alice, bob]``).")

#: Values never shown by getNimbusConf/getTopologyConf or the UI.
SECRET_KEYS = frozenset({STORM_ZOOKEEPER_AUTH_PAYLOAD.name, STORM_ZOOKEEPER_TOPOLOGY_AUTH_PAYLOAD.name})
#: Key names that look like credentials (any key, at any depth, containing one of these words).
CREDENTIAL_WORDS = ("password", "passwd", "secret", "token")
REDACTED = "****"
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*):(?P<password>[^/@\s]*)@")


def _looks_like_credential(key: Any) -> bool:
    name = str(key).lower()
    return str(key) in SECRET_KEYS or any(word in name for word in CREDENTIAL_WORDS)


def _redact_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: (REDACTED if _looks_like_credential(k) and v not in (None, "") else _redact_value(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(v) for v in value]
    if isinstance(value, str):
        return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", value)
    return value


def redacted(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with credentials replaced, for answers to clients that are not the cluster admin.

    Replaced: ``SECRET_KEYS``, every key (at any depth, e.g. inside ``topology.environment``)
    whose name contains password/passwd/secret/token, and the password of any ``scheme://user:pass@``
    URL in a string value. Keys stay, so a reader still sees that a value is set."""
    result = _redact_value(conf)
    assert isinstance(result, dict)
    return result

#: Namespaces whose keys are all declared above: an unknown one there is most likely a typo.
#: ``spark.*`` is checked only under ``spark.sink.``: other spark keys go to the SparkSession builder.
CHECKED_NAMESPACES = ("storm.", "nimbus.", "supervisor.", "worker.", "topology.", "ui.", "transactional.",
                      "spark.sink.", "spark.state.", "logviewer.", "dev.")
#: Storm's ``topology.tasks``, read from a component's config. Declared without ``_key``: it has
#: no topology-wide value, so it stays out of ``KEYS`` (and of every ``Config``'s defaults).
TOPOLOGY_TASKS = Key("topology.tasks", None, int, "Tasks of a component, set in its component config; "
                     "unset: one task per executor (its parallelism hint).")
#: Storm keys read from component configs but without a global default.
KNOWN_UNDECLARED = frozenset({TOPOLOGY_TASKS.name})
_warned: set[str] = set()


def unknown_keys(values: Iterable[str]) -> list[tuple[str, str | None]]:
    """``(key, closest known key or None)`` for each key in a checked namespace that is not declared."""
    import difflib

    known = sorted(set(KEYS) | KNOWN_UNDECLARED)
    found = []
    for name in values:
        if isinstance(name, str) and name.startswith(CHECKED_NAMESPACES) and name not in KEYS \
                and name not in KNOWN_UNDECLARED:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            found.append((name, close[0] if close else None))
    return found


def warn_unknown_keys(values: Iterable[str], logger: Any = None) -> list[str]:
    """Log one warning per unknown key (once per process), naming the closest known key; returns
    the warning texts. User keys outside the checked namespaces stay silent."""
    import logging

    logger = logger or logging.getLogger(__name__)
    texts = []
    for name, close in unknown_keys(values):
        if name in _warned:
            continue
        _warned.add(name)
        text = f"unknown config key {name!r}" + (f" (did you mean {close}?)" if close else "")
        logger.warning("%s", text)
        texts.append(text)
    return texts

# ---------------------------------------------------------------- windowed and stateful bolts (DESIGN 12)
# Storm's names. The window keys are set in a windowed bolt's component config by
# WindowedBolt.with_window & co (Storm's getComponentConfiguration), so submit can check them.
WINDOW_LENGTH_COUNT = _key("topology.bolts.window.length.count", None, int, "Window length in tuples.")
WINDOW_LENGTH_DURATION_MS = _key("topology.bolts.window.length.duration.ms", None, int, "Window length in ms.")
SLIDING_INTERVAL_COUNT = _key("topology.bolts.sliding.interval.count", None, int, "Window slide in tuples.")
SLIDING_INTERVAL_DURATION_MS = _key("topology.bolts.sliding.interval.duration.ms", None, int, "Window slide in ms.")
TIMESTAMP_FIELD = _key("topology.bolts.tuple.timestamp.field.name", None, str, "Event-time field (ms since the epoch).")
TIMESTAMP_MAX_LAG_MS = _key("topology.bolts.tuple.timestamp.max.lag.ms", None, int, "How far event time may lag (ms).")
WATERMARK_INTERVAL_MS = _key("topology.bolts.watermark.event.interval.ms", None, int, "Watermark every this many ms (default 1000).")
LATE_TUPLE_STREAM = _key("topology.bolts.late.tuple.stream", None, str, "Stream that receives tuples older than the watermark.")
TOPOLOGY_STATE_PROVIDER = _key("topology.state.provider", "sqlite", str, "Stateful bolts' KeyValueState: memory, sqlite (embedded default) or redis.")
TOPOLOGY_STATE_PROVIDER_CONFIG = _key("topology.state.provider.config", None, dict, "Provider settings: {path} for sqlite (default <storm.local.dir>/state/kv_state.db, the topology's storm.local.dir; with supervisor.run.worker.as.user: <the supervisor's storm.local.dir>/state/users/<uid>/kv_state.db, which outlives the worker's own directory), {url, prefix} for redis.")
TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS = _key("topology.state.checkpoint.interval.ms", 1000, int, "The checkpoint spout starts a checkpoint this often.")

def local_bind_host(conf: Mapping[str, Any], any_host: str = "0.0.0.0") -> str:
    """Where a daemon or worker binds: ``storm.local.hostname`` when it is an IP address (a host
    with its own address, e.g. a network namespace: bind that address, never 127.0.0.1), else
    ``any_host`` (every interface), because a name may resolve to a loopback address."""
    host = conf.get(STORM_LOCAL_HOSTNAME.name)
    try:
        ipaddress.ip_address(host or "")
    except ValueError:
        return any_host
    return str(host)
