"""Redis Streams spouts on the local runner against a real redis-server.

Core: entries read by a consumer that died (read, never acked) are claimed with XAUTOCLAIM and
delivered; failed tuples come back; at the end nothing is pending in the group.
Trident: the opaque spout over stream ids counts exactly, entries added while it runs included.
"""
from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from stormpy import Bolt, Topology
from stormpy.local.runner import LocalTopology
from stormpy.redis import OpaqueRedisStreamSpout, RedisStreamSpout
from stormpy.testing import wait_until
from stormpy.testing.reporters import HeldReporter
from stormpy.trident import Count, Function, SqliteMapState, TridentTopology

LOCK = threading.Lock()
SEEN: Counter = Counter()
FAILED_ONCE: set[str] = set()


class FlakyRecorder(Bolt):
    """Fails the first delivery of every 7th entry; counts the rest."""

    auto_ack = False

    def process(self, tup: Any) -> None:
        entry_id = tup.values.id
        with LOCK:
            if int(tup.values.fields["n"]) % 7 == 0 and entry_id not in FAILED_ONCE:
                FAILED_ONCE.add(entry_id)
                self.fail(tup)
                return
            SEEN[tup.values.fields["n"]] += 1
        self.ack(tup)


def test_dead_consumers_entries_are_claimed_and_everything_acked(redis_server: Any) -> None:
    stream, group = f"events-{uuid.uuid4().hex[:6]}", "counters"
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    client.xgroup_create(stream, group, id="0", mkstream=True)
    for n in range(300):
        client.xadd(stream, {"n": str(n)})
    taken = client.xreadgroup(group, "dead-task", {stream: ">"}, count=60)   # read, never acked
    assert len(taken[0][1]) == 60
    with LOCK:
        SEEN.clear()
        FAILED_ONCE.clear()
    spout = RedisStreamSpout(redis_server.url, [stream], group=group, claim_idle_ms=1000, claim_interval_ms=300,
                             retry_delay_ms=50)

    class Events(Topology):
        events = spout.spec(par=2)
        sink = FlakyRecorder.spec(inputs=[events], par=2)

    local = LocalTopology(Events, "redis-streams", user_overrides={"topology.message.timeout.secs": 30}).start()
    try:
        wait_until(lambda: len(SEEN) == 300, 60, "all 300 entries, the dead consumer's 60 included")
        wait_until(lambda: client.xpending(stream, group)["pending"] == 0, 30, "nothing pending in the group")
    finally:
        local.stop(drain_secs=5)
    assert len(FAILED_ONCE) == len([n for n in range(300) if n % 7 == 0])
    assert set(SEEN) == {str(n) for n in range(300)}


class Counts(Bolt):
    def process(self, tup: Any) -> None:
        with LOCK:
            SEEN[tup.values.fields["n"]] += 1


def test_acks_go_to_redis_many_per_xack(redis_server: Any) -> None:
    """An XACK per tuple is a round trip per tuple on the executor's thread (4,700-5,500 entries/s
    in a word count over a stream); the acks of a step go in one XACK per stream. Counted by the
    server itself (INFO commandstats)."""
    stream, group = f"acks-{uuid.uuid4().hex[:6]}", "ackers"
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    client.xgroup_create(stream, group, id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for n in range(2000):
        pipe.xadd(stream, {"n": str(n)})
    pipe.execute()
    with LOCK:
        SEEN.clear()

    class Acked(Topology):
        events = RedisStreamSpout(redis_server.url, [stream], group=group).spec(par=1)
        sink = Counts.spec(inputs=[events], par=2)

    client.config_resetstat()
    local = LocalTopology(Acked, "redis-acks").start()
    try:
        wait_until(lambda: len(SEEN) == 2000, 60, "2,000 entries counted")
        wait_until(lambda: client.xpending(stream, group)["pending"] == 0, 30, "every entry XACKed")
    finally:
        local.stop(drain_secs=5)
    xacks = int(client.info("commandstats").get("cmdstat_xack", {}).get("calls", 0))
    assert 0 < xacks <= 1000, f"{xacks} XACK calls for 2,000 entries"   # one per tuple before
    assert set(SEEN.values()) == {1}


def test_kept_acks_are_sent_on_deactivate_at_once_while_inactive_and_on_close(redis_server: Any) -> None:
    """Kept acks wait for the next ``next_tuple``, which is not called while the topology is
    deactivated: deactivate sends them, and an ack arriving then (a tree completing late) goes
    at once; close sends the rest. An entry acked and never XACK-ed would be claimed and emitted
    again by another consumer."""
    stream, group = f"kept-{uuid.uuid4().hex[:6]}", "keepers"
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    ids = [client.xadd(stream, {"n": str(n)}) for n in range(3)]
    spout = RedisStreamSpout(redis_server.url, [stream], group=group)
    spout.initialize({}, None)
    client.xreadgroup(group, spout.consumer, {stream: ">"}, count=3)   # what next_tuple reads
    for entry_id in ids:
        spout.in_flight[(stream, entry_id)] = ([stream, entry_id, {}], 0)

    def pending() -> list[str]:
        return [p["message_id"] for p in client.xpending_range(stream, group, min="-", max="+", count=10)]

    spout.ack((stream, ids[0]))
    assert pending() == ids, "kept until the next next_tuple"
    spout.deactivate()
    assert pending() == ids[1:]
    spout.ack((stream, ids[1]))
    assert pending() == ids[2:], "sent at once while inactive"
    spout.activate()
    spout.ack((stream, ids[2]))
    assert pending() == ids[2:]
    spout.close()
    assert pending() == []


class FailsNine(Bolt):
    """Fails entry 9 every time (given up after ``max_retries``); acks the rest."""

    auto_ack = False

    def process(self, tup: Any) -> None:
        if tup.values[2] == "9":
            self.fail(tup)
            return
        with LOCK:
            SEEN[tup.values[2]] += 1
        self.ack(tup)


def test_skipped_entries_are_acked_only_once_their_error_is_kept(redis_server: Any) -> None:
    """Undecodable (n=5) or given up (n=9): acked after the report is kept, so a crash in between
    leaves the entry pending, to be claimed and reported again."""
    stream, group = f"skips-{uuid.uuid4().hex[:6]}", "skippers"
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    ids = [client.xadd(stream, {"n": str(n)}) for n in range(20)]
    with LOCK:
        SEEN.clear()

    def translate(stream: str, entry_id: str, fields: dict[str, str]) -> list[Any]:
        if fields["n"] == "5":
            raise ValueError("no schema for 5")
        return [stream, entry_id, fields["n"]]

    # claims every 100 ms of entries idle 300 ms: the two held entries are claimed back while their
    # errors wait, and must not be translated (and reported) again
    spout = RedisStreamSpout(redis_server.url, [stream], group=group, retry_delay_ms=20, max_retries=2,
                             claim_idle_ms=300, claim_interval_ms=100, record_translator=(translate, ["stream", "id", "n"]))

    class Skips(Topology):
        entries = spout.spec(par=1)
        sink = FailsNine.spec(inputs=[entries], par=1)

    reporter = HeldReporter()
    local = LocalTopology(Skips, "redis-skips", user_overrides={"topology.message.timeout.secs": 30})
    local.reporter = local.runtime.reporter = reporter
    local.start()
    try:
        def pending() -> list[str]:
            return sorted(p["message_id"] for p in client.xpending_range(stream, group, min="-", max="+", count=100))

        wait_until(lambda: len(SEEN) == 18 and len(reporter.held) == 2, 30, "18 entries acked, 2 reported")
        wait_until(lambda: pending() == sorted([ids[5], ids[9]]), 30, "the 18 acked entries XACKed")
        time.sleep(1.5)
        assert pending() == sorted([ids[5], ids[9]]), "skipped before the errors were kept"
        assert len(reporter.held) == 2, "a held entry claimed back was reported again"
        assert reporter.release() == 2
        wait_until(lambda: client.xpending(stream, group)["pending"] == 0, 30, "both acked once their errors were kept")
    finally:
        local.stop(drain_secs=5)
    texts = [text for _t, _task, text in reporter.errors.get("entries", [])]
    assert any("could not be translated" in t for t in texts) and any("failed 3 times" in t for t in texts), texts


class Split(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        for word in tup["fields"]["line"].split():
            collector.emit([word])


def test_opaque_stream_spout_counts_exactly(redis_server: Any, tmp_path: Path) -> None:
    streams = [f"lines-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    rnd = random.Random(3)
    words = "redis stream entry id trident opaque".split()
    lines = [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 5))) for _ in range(400)]
    for i, line in enumerate(lines[:250]):
        client.xadd(streams[i % 2], {"line": line})
    db = tmp_path / "counts.db"
    factory = SqliteMapState.opaque(db)

    class StreamCounts(TridentTopology):
        config = {"topology.trident.batch.emit.interval.millis": 50}

        def build(self, conf: Any) -> None:
            (self.new_stream("lines", OpaqueRedisStreamSpout(redis_server.url, streams, max_batch_size=40), par=2)
                 .each(["fields"], Split(), ["word"])
                 .group_by(["word"])
                 .persistent_aggregate(factory, Count(), ["count"]))

    def counts() -> Counter:
        try:
            return Counter({k[0]: v for k, v in factory.open_map().items()})
        except Exception:  # noqa: BLE001 - not created yet
            return Counter()

    local = LocalTopology(StreamCounts, "redis-opaque").start()
    try:
        expected = Counter(w for line in lines[:250] for w in line.split())
        wait_until(lambda: counts() == expected, 60, "the first 250 lines counted")
        for i, line in enumerate(lines[250:]):
            client.xadd(streams[i % 2], {"line": line})
        expected = Counter(w for line in lines for w in line.split())
        wait_until(lambda: counts() == expected, 60, "all 400 lines counted")
        time.sleep(1.0)
        assert counts() == expected
    finally:
        local.stop(drain_secs=5)


def test_bad_arguments_are_one_clear_error() -> None:
    with pytest.raises(ValueError, match="url must be"):
        RedisStreamSpout("localhost:6379", ["s"], group="g")
    with pytest.raises(ValueError, match="group is required"):
        RedisStreamSpout("redis://localhost:6379/0", ["s"], group="")
    with pytest.raises(ValueError, match="streams must be"):
        RedisStreamSpout("redis://localhost:6379/0", [], group="g")
    with pytest.raises(ValueError, match="block_ms must be positive"):   # BLOCK 0 waits for ever
        RedisStreamSpout("redis://localhost:6379/0", ["s"], group="g", block_ms=0)
