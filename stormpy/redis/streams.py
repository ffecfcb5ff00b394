"""Redis Streams spouts: a core spout over a consumer group, and a Trident opaque spout over ids.

:class:`RedisStreamSpout` (at least once): every task is one consumer of the group ``group``
(``XREADGROUP ... >``); an entry is ``XACK``-ed when its tuple tree completes (one ``XACK`` per
stream for the entries acked since the task's previous ``next_tuple``, ``batch_size`` of them or
those of the last 100 ms), and a failed one is emitted again after ``retry_delay_ms``. A read
never blocks while the task has tuples in flight (their acks wait on the same thread), and
blocks at most ``block_ms`` (10) when it has none: a process runs its executors on one loop
thread, where a step that waits more than 50 ms moves the spout to a thread of its own.

Entries a consumer read and never acked (its worker was killed) stay in the group's pending
list; every ``claim_interval_ms`` each task takes over the entries idle for more than
``claim_idle_ms`` (``XAUTOCLAIM``) and emits them, so a dead task's records are re-delivered
to a live one. Keep ``claim_idle_ms`` above the topology's message timeout, or a slow tuple is
claimed (and emitted) twice.

:class:`OpaqueRedisStreamSpout` (Trident): one Trident partition per stream; a batch is the
entries after the previous batch's last id (``XRANGE (last +``), its meta
``{"first_id", "last_id"}`` stored by Trident's coordinator, so with an opaque state every entry is
counted exactly once. It reads, never acks: trim the stream (``MAXLEN``/``MINID``) by age.

Tuples are ``stream, id, fields`` (``fields``: the entry's field -> value dict, decoded as UTF-8),
or what ``record_translator`` returns (a function ``(stream, id, fields) -> values | None`` with
the field names it emits, given as ``(func, fields)``).
"""
from __future__ import annotations

import functools
import heapq
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stormpy.api.component import Spout
from stormpy.trident.runtime.spouts import OpaquePartitionedSpout

log = logging.getLogger(__name__)

DEFAULT_FIELDS = ("stream", "id", "fields")
#: The longest a RedisStreamSpout keeps an ack unsent while acks keep coming (``flush_acks``):
#: under backpressure or at ``topology.max.spout.pending`` no ``next_tuple`` sends them.
ACK_DELAY_SECS = 0.1


def _translator(value: Any) -> tuple[Callable[[str, str, dict[str, str]], list[Any] | None], tuple[str, ...]]:
    if value is None:
        return (lambda stream, entry_id, fields: [stream, entry_id, fields]), DEFAULT_FIELDS
    if isinstance(value, tuple) and len(value) == 2 and callable(value[0]):
        return value[0], tuple(value[1])
    raise TypeError(f"record_translator must be a (function, fields) pair, given {value!r}")


def _streams(streams: Sequence[str] | str) -> list[str]:
    names = [streams] if isinstance(streams, str) else list(streams)
    if not names or not all(isinstance(s, str) and s for s in names):
        raise ValueError(f"streams must be stream names, given {streams!r}")
    return names


class RedisStreamSpout(Spout):
    """``RedisStreamSpout("redis://host:6379/0", ["events"], group="counts").spec(par=2)``; see the module doc."""

    def __init__(self, url: str, streams: Sequence[str] | str, group: str, start_id: str = "0",
                 batch_size: int = 100, block_ms: int = 10, claim_idle_ms: int = 30_000,
                 claim_interval_ms: int = 1_000, retry_delay_ms: int = 100, max_retries: int = -1,
                 record_translator: Any = None, redis_kwargs: Mapping[str, Any] | None = None) -> None:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"RedisStreamSpout: url must be redis://, rediss:// or unix://, given {url!r}")
        if not group:
            raise ValueError("RedisStreamSpout: group is required (the consumer group the tasks share)")
        for name, value in (("batch_size", batch_size), ("block_ms", block_ms), ("claim_idle_ms", claim_idle_ms),
                            ("claim_interval_ms", claim_interval_ms)):
            if int(value) <= 0:
                raise ValueError(f"RedisStreamSpout: {name} must be positive, given {value!r}")
        self.url = url
        self.streams = _streams(streams)
        self.group = group
        self.start_id = start_id
        self.batch_size = int(batch_size)
        self.block_ms = int(block_ms)
        self.claim_idle_ms = int(claim_idle_ms)
        self.claim_interval = claim_interval_ms / 1000.0
        self.retry_delay = retry_delay_ms / 1000.0
        self.max_retries = max_retries
        self.translate, fields = _translator(record_translator)
        self.outputs = list(fields)
        self.redis_kwargs = dict(redis_kwargs or {})

    @property
    def spec(self) -> Any:  # type: ignore[override]
        """Declare this spout in a Topology class (its outputs are the translator's fields)."""
        from stormpy.api.dsl import instance_spec

        return instance_spec(self)

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        import redis

        self.client = redis.Redis.from_url(self.url, decode_responses=True, **self.redis_kwargs)
        # unique per task instance: a restarted task is a new consumer; the old one's entries are claimed
        self.consumer = f"{getattr(context, 'component_id', 'spout')}-{getattr(context, 'task_id', 0)}-{uuid.uuid4().hex[:8]}"
        for stream in self.streams:
            try:
                self.client.xgroup_create(stream, self.group, id=self.start_id, mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self.buffer: deque[tuple[str, str, dict[str, str]]] = deque()
        self.in_flight: dict[tuple[str, str], tuple[list[Any], int]] = {}
        self.settling: set[tuple[str, str]] = set()   # skipped, acked once the error is kept
        self.acked: dict[str, list[str]] = {}   # stream -> ids acked, not yet XACK-ed (flush_acks)
        self.kept_since = 0.0                   # when the oldest of them was acked
        self.active = True
        self.retries: list[tuple[float, tuple[str, str]]] = []
        self.next_claim = 0.0
        self.claim_cursor = {s: "0-0" for s in self.streams}

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None and getattr(self, "acked", None):
            try:
                self.flush_acks()
            except Exception as exc:   # noqa: BLE001 - the entries stay pending and are claimed again
                log.warning("RedisStreamSpout %s: acks not sent on close: %s", self.consumer, exc)
        if client is not None:
            client.close()

    def activate(self) -> None:
        self.active = True

    def deactivate(self) -> None:
        self.active = False   # next_tuple, which sends kept acks, is not called now: ack sends them
        try:
            self.flush_acks()
        except Exception as exc:   # noqa: BLE001 - kept: sent by the next ack or flush, or claimed again
            log.warning("RedisStreamSpout %s: acks not sent on deactivate: %s", self.consumer, exc)

    def flush_acks(self) -> None:
        """Send the kept acks, one ``XACK`` per stream; a stream's ids are forgotten once sent.

        Why: an ``XACK`` per tuple is a round trip per tuple on the executor's thread; the word
        count over a stream acked 4,700-5,500 entries/s that way, and its steps waited long
        enough on the socket to move the spout off the executor loop. Acks are kept until the
        next ``next_tuple``, ``batch_size`` of them, or ``ACK_DELAY_SECS`` (``ack`` checks; while
        inactive it sends at once), far below ``claim_idle_ms``; a crash before they are sent
        leaves the entries pending, to be claimed and emitted again (at least once)."""
        for stream in list(self.acked):
            self.client.xack(stream, self.group, *self.acked[stream])
            del self.acked[stream]

    def next_tuple(self) -> None:
        if self.acked:
            self.flush_acks()
        now = time.monotonic()
        if self.retries and self.retries[0][0] <= now:
            _, key = heapq.heappop(self.retries)
            entry = self.in_flight.get(key)
            if entry is not None:
                self.emit(entry[0], tup_id=key)
            return
        if not self.buffer and now >= self.next_claim:
            self.next_claim = now + self.claim_interval
            self._claim()
        if not self.buffer:
            self._read()
        if self.buffer:
            stream, entry_id, fields = self.buffer.popleft()
            key = (stream, entry_id)
            if key in self.in_flight or key in self.settling:
                return   # our own slow tuple (or skipped entry), claimed back from ourselves
            try:
                values = self.translate(stream, entry_id, fields)
            except Exception as exc:
                # acked once the error is kept: a crash before that leaves the entry to be claimed and reported again
                self.settling.add(key)
                self._stormpy_collector.report_error(
                    f"RedisStreamSpout: entry {stream} {entry_id} could not be translated "
                    f"({type(exc).__name__}: {exc}); acked and skipped",
                    then=functools.partial(self._skipped, key))
                return
            if values is None:
                self._keep_ack(stream, entry_id)   # nothing to emit: done
                return
            self.in_flight[key] = (values, 0)
            self.emit(values, tup_id=key)

    def _read(self) -> None:
        block = None if self.in_flight else self.block_ms   # acks must not wait behind a block
        answer = self.client.xreadgroup(self.group, self.consumer, {s: ">" for s in self.streams},
                                        count=self.batch_size, block=block)
        for stream, entries in answer or []:
            for entry_id, fields in entries:
                self.buffer.append((stream, entry_id, fields or {}))

    def _claim(self) -> None:
        for stream in self.streams:
            answer = self.client.xautoclaim(stream, self.group, self.consumer, self.claim_idle_ms,
                                            start_id=self.claim_cursor[stream], count=self.batch_size)
            cursor, entries = answer[0], answer[1]
            self.claim_cursor[stream] = cursor
            for entry_id, fields in entries:
                if fields is None:
                    continue   # deleted from the stream meanwhile (Redis 6.2 answers nil)
                self.buffer.append((stream, entry_id, fields))
            if entries:
                log.info("RedisStreamSpout %s claimed %d idle entries of %s", self.consumer, len(entries), stream)

    def _skipped(self, key: tuple[str, str]) -> None:
        self.client.xack(key[0], self.group, key[1])
        self.settling.discard(key)

    def ack(self, tup_id: Any) -> None:
        if self.in_flight.pop(tup_id, None) is not None:
            self._keep_ack(tup_id[0], tup_id[1])

    def _keep_ack(self, stream: str, entry_id: str) -> None:
        """Keep an ack for the next ``XACK`` of its stream (see ``flush_acks``)."""
        now = time.monotonic()
        if not self.acked:
            self.kept_since = now
        kept = self.acked.setdefault(stream, [])
        kept.append(entry_id)
        if len(kept) >= self.batch_size or not self.active or now - self.kept_since >= ACK_DELAY_SECS:
            self.flush_acks()

    def fail(self, tup_id: Any) -> None:
        entry = self.in_flight.get(tup_id)
        if entry is None:
            return
        values, failures = entry[0], entry[1] + 1
        if 0 <= self.max_retries < failures:
            self._stormpy_collector.report_error(
                f"RedisStreamSpout: entry {tup_id[0]} {tup_id[1]} failed {failures} times; acked and given up",
                then=functools.partial(self.ack, tup_id))
            return
        self.in_flight[tup_id] = (values, failures)
        heapq.heappush(self.retries, (time.monotonic() + self.retry_delay, tup_id))


class OpaqueRedisStreamSpout(OpaquePartitionedSpout):
    """Trident opaque spout over Redis Streams: one partition per stream; see the module doc."""

    def __init__(self, url: str, streams: Sequence[str] | str, max_batch_size: int = 500, start_id: str = "-",
                 record_translator: Any = None, redis_kwargs: Mapping[str, Any] | None = None) -> None:
        if max_batch_size <= 0:
            raise ValueError(f"OpaqueRedisStreamSpout: max_batch_size must be positive, given {max_batch_size!r}")
        self.url = url
        self.streams = _streams(streams)
        self.max_batch_size = int(max_batch_size)
        self.start_id = start_id
        self.translate, fields = _translator(record_translator)
        self.outputs = list(fields)
        self.redis_kwargs = dict(redis_kwargs or {})

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        import redis

        self.client = redis.Redis.from_url(self.url, decode_responses=True, **self.redis_kwargs)

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()

    def partitions(self) -> list[str]:
        return list(self.streams)

    def emit_batch(self, txid: int, collector: Any, partition: Any, last_meta: Any) -> Any:
        start = f"({last_meta['last_id']}" if last_meta and last_meta.get("last_id") else self.start_id
        entries = self.client.xrange(partition, min=start, max="+", count=self.max_batch_size)
        for entry_id, fields in entries:
            try:
                values = self.translate(partition, entry_id, fields or {})
            except Exception as exc:   # never stalls the stream: the entry is skipped
                log.warning("OpaqueRedisStreamSpout: entry %s %s could not be translated (%s); skipped",
                            partition, entry_id, exc)
                continue
            if values is not None:
                collector.emit(values)
        if not entries:
            return last_meta   # nothing new: the next batch starts at the same place
        return {"first_id": entries[0][0], "last_id": entries[-1][0]}
