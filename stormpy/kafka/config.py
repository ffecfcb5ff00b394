"""KafkaSpoutConfig: storm-kafka-client's settings, with its names, for :class:`KafkaSpout`.

The settings a Storm user knows keep their names (``bootstrap_servers``, ``topics``,
``group_id``, ``first_poll_offset_strategy``, ``processing_guarantee``,
``max_uncommitted_offsets``, ``offset_commit_period_ms``, ``record_translator``, ``retry``);
everything else goes to librdkafka unchanged through ``kafka_conf`` (security, SASL, SSL,
fetch sizes), so a production cluster needs no code here.
"""
from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stormpy.task.runtime import process_affinity


def new_client(kind: Callable[..., Any], conf: Mapping[str, Any]) -> Any:
    """A librdkafka client (``confluent_kafka.Consumer`` or ``Producer``) whose threads may run on
    every core of the process.

    Why: librdkafka fetches, produces, compresses and decompresses on threads of its own (a
    main thread and one per broker), started when the client is made, and a new thread inherits
    the mask of the thread that starts it. ``stormpy local`` and pinned workers keep their
    executor threads on one core (``runtime.choose_cpu``, ``slot_cpu``): a client made there put
    all of its threads on that core too, beside the executor loop, while the other core idled.
    The Trident Kafka spout holds a consumer per partition (four threads or more each)."""
    with process_affinity():
        return kind(dict(conf), logger=logging.getLogger("stormpy.kafka.librdkafka"))


class FirstPollOffsetStrategy(str, enum.Enum):
    """Where a partition starts when the spout is first deployed (storm-kafka-client's names).

    ``EARLIEST``/``LATEST`` ignore offsets committed by an earlier deployment (another topology
    id) and start at the partition's first/next record; offsets this deployment committed are
    always resumed. ``UNCOMMITTED_EARLIEST``/``UNCOMMITTED_LATEST`` resume the group's committed
    offset, and start at the first/next record only where nothing was committed.
    """

    EARLIEST = "EARLIEST"
    LATEST = "LATEST"
    UNCOMMITTED_EARLIEST = "UNCOMMITTED_EARLIEST"
    UNCOMMITTED_LATEST = "UNCOMMITTED_LATEST"


class ProcessingGuarantee(str, enum.Enum):
    """``AT_LEAST_ONCE``: tuples tracked, failed ones re-emitted (bounded retry), offsets committed
    only up to the lowest un-acked offset of each partition. ``AT_MOST_ONCE``: offsets committed
    right after each poll, before anything is emitted; no tracking. ``NO_GUARANTEE``: no
    tracking, offsets committed every ``offset_commit_period_ms`` whatever happened."""

    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    AT_MOST_ONCE = "AT_MOST_ONCE"
    NO_GUARANTEE = "NO_GUARANTEE"


@dataclass(frozen=True)
class RetryPolicy:
    """storm-kafka-client's ``KafkaSpoutRetryExponentialBackoff``: the n-th retry of a record waits
    ``initial_delay_ms + delay_period_ms * 2**(n-1)``, at most ``max_delay_ms``; after
    ``max_retries`` failures the record is given up on (logged, reported and counted as done,
    so its partition's commits move on). ``max_retries=-1`` retries forever."""

    initial_delay_ms: int = 0
    delay_period_ms: int = 2
    max_retries: int = -1
    max_delay_ms: int = 10_000

    def delay_secs(self, failures: int) -> float:
        delay = self.initial_delay_ms + self.delay_period_ms * (2 ** max(0, min(failures - 1, 30)))
        return min(delay, self.max_delay_ms) / 1000.0

    def retry_allowed(self, failures: int) -> bool:
        return self.max_retries < 0 or failures <= self.max_retries


class RecordTranslator:
    """Turns a consumed record into the tuple's values (a list), or None to skip it.

    The default emits ``topic, partition, offset, key, value`` with key and value decoded as
    UTF-8 (``encoding=None`` keeps bytes). A record the translator cannot decode raises; the
    spout reports it as the component's error and skips it (it never stalls the partition).
    Subclass and override ``apply``/``fields``, or pass ``record_translator=(func, fields)``.
    """

    fields: tuple[str, ...] = ("topic", "partition", "offset", "key", "value")
    stream: str = "default"

    def __init__(self, encoding: str | None = "utf-8") -> None:
        self.encoding = encoding

    def _decode(self, raw: bytes | None) -> Any:
        if raw is None or self.encoding is None:
            return raw
        return raw.decode(self.encoding)

    def apply(self, record: Any) -> list[Any] | None:
        return [record.topic(), record.partition(), record.offset(), self._decode(record.key()),
                self._decode(record.value())]


class FuncTranslator(RecordTranslator):
    """A plain function ``record -> values | None`` with the field names it emits."""

    def __init__(self, func: Callable[[Any], list[Any] | None], fields: Sequence[str],
                 stream: str = "default") -> None:
        super().__init__(None)
        self.func = func
        self.fields = tuple(fields)
        self.stream = stream

    def apply(self, record: Any) -> list[Any] | None:
        return self.func(record)


_DEFAULT_APPLY, _DEFAULT_DECODE = RecordTranslator.apply, RecordTranslator._decode


def is_plain_default(translator: RecordTranslator) -> bool:
    """Whether ``translator`` is the default RecordTranslator as written: not a subclass, no
    ``apply`` or ``_decode`` replaced on the instance or the class. The spouts then make its values
    inline (where they read a record's fields anyway) instead of calling ``apply`` a record."""
    return (type(translator) is RecordTranslator and not {"apply", "_decode"} & vars(translator).keys()
            and RecordTranslator.apply is _DEFAULT_APPLY and RecordTranslator._decode is _DEFAULT_DECODE)


def make_translator(value: Any) -> RecordTranslator:
    if value is None:
        return RecordTranslator()
    if isinstance(value, RecordTranslator):
        return value
    if isinstance(value, tuple) and len(value) == 2 and callable(value[0]):
        return FuncTranslator(value[0], value[1])
    raise TypeError("record_translator must be a RecordTranslator or a (function, fields) pair, "
                    f"given {value!r}")


@dataclass
class KafkaSpoutConfig:
    """Everything a KafkaSpout needs; see the module doc for where the names come from.

    ``topics``: a list of topic names, or a regex (a ``re.Pattern``, or a string starting with
    ``^``) matched against every topic, including ones created later.
    ``max_uncommitted_offsets``: polling of a task stops while this many offsets wait behind
    its commit point (un-acked or not yet committable), retries still go out.
    ``poll_timeout_ms``: how long one poll may wait for records while nothing of this task is in
    flight; with tuples in flight it never waits (their acks, and the bolts of an executor loop,
    wait on the same thread). 1 ms where storm-kafka-client waits 200: ``stormpy local`` and
    workers run a process's executors on one loop thread, where a spout's wait holds up every
    other executor, and a step that waits more than 50 ms moves the spout to a thread of its own
    (with a warning). Between empty polls the executor sleeps
    ``topology.sleep.spout.wait.strategy.time.ms``; librdkafka fetches in its own threads, so a
    poll that does not wait still finds what arrived.
    """

    bootstrap_servers: str
    topics: Sequence[str] | str | re.Pattern[str]
    group_id: str
    first_poll_offset_strategy: FirstPollOffsetStrategy | str = FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST
    processing_guarantee: ProcessingGuarantee | str = ProcessingGuarantee.AT_LEAST_ONCE
    max_uncommitted_offsets: int = 10_000_000
    offset_commit_period_ms: int = 30_000
    record_translator: Any = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    poll_timeout_ms: int = 1
    max_poll_records: int = 500
    kafka_conf: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.bootstrap_servers or not isinstance(self.bootstrap_servers, str):
            raise ValueError("KafkaSpoutConfig: bootstrap_servers must be 'host:port[,host:port...]'")
        if not self.group_id:
            raise ValueError("KafkaSpoutConfig: group_id is required (partitions are shared by the group)")
        self.first_poll_offset_strategy = _enum(FirstPollOffsetStrategy, self.first_poll_offset_strategy,
                                                "first_poll_offset_strategy")
        self.processing_guarantee = _enum(ProcessingGuarantee, self.processing_guarantee, "processing_guarantee")
        self.record_translator = make_translator(self.record_translator)
        self.subscription()   # fails now on an empty topic list
        for name in ("max_uncommitted_offsets", "offset_commit_period_ms", "poll_timeout_ms", "max_poll_records"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"KafkaSpoutConfig: {name} must be positive, given {getattr(self, name)!r}")

    def subscription(self) -> list[str]:
        """The topic list for librdkafka's subscribe (a regex is one entry starting with ``^``)."""
        topics = self.topics
        if isinstance(topics, re.Pattern):
            return ["^" + topics.pattern.lstrip("^")]
        if isinstance(topics, str):
            return [topics]
        names = list(topics)
        if not names or not all(isinstance(t, str) and t for t in names):
            raise ValueError(f"KafkaSpoutConfig: topics must be topic names or a pattern, given {topics!r}")
        return names

    def consumer_conf(self) -> dict[str, Any]:
        """librdkafka consumer settings: ours, then ``kafka_conf`` (which may not re-enable auto commit)."""
        strategy = self.first_poll_offset_strategy
        reset = "latest" if strategy in (FirstPollOffsetStrategy.LATEST,
                                         FirstPollOffsetStrategy.UNCOMMITTED_LATEST) else "earliest"
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "group.id": self.group_id,
                                "auto.offset.reset": reset, "log_level": 4}
        conf.update(self.kafka_conf)
        conf["enable.auto.commit"] = False          # the spout decides what is committed
        conf["enable.auto.offset.store"] = False
        return conf


def _enum(cls: type[enum.Enum], value: Any, name: str) -> Any:
    try:
        return cls(value.value if isinstance(value, enum.Enum) else str(value).upper())
    except ValueError:
        raise ValueError(f"KafkaSpoutConfig: {name} must be one of {[m.value for m in cls]}, "
                         f"given {value!r}") from None
