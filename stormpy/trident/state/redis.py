"""RedisMapState: a Trident map state in a real Redis server, shared by every host of a cluster.

SqliteMapState lives on one host; when a state partition moves to another host after a failure,
it must find its values in a networked store. This is that store.

Layout (stable, so any language can read it; the same ``(url, prefix)`` reads it back):

- key:   ``<prefix>:<JSON list of the key values>``, compact UTF-8 JSON, e.g. ``wc:["the"]``
  (a composite group-by key: ``sales:["2024-01-02","fr"]``);
- value: a JSON string: ``[txid, value]`` (transactional), ``[txid, prev, curr]`` (opaque) or the
  bare value (non-transactional), e.g. ``GET 'wc:["the"]'`` -> ``[17,4242]``.

Every key of a state is under its prefix, so give each state its own prefix (any string without
``:[``; ``app:wc`` and ``app:wc:v2`` are distinct states); ``items()`` lists a state with
``SCAN MATCH <prefix>:[*``, which never matches another prefix's keys.

Round trips: ``multi_get`` is one ``MGET`` (several in one pipeline above ``chunk_keys`` keys);
``multi_put`` is one ``MSET`` (several inside one MULTI/EXEC pipeline above ``chunk_keys``), so a
put lands whole or not at all. Both are idempotent, which makes redis-py's single retry on a
connection error safe.

Failures: while Redis is unreachable a call raises ``redis.ConnectionError`` (after one quick
reconnect attempt): the batch fails and the coordinator replays it. The client reconnects by
itself on the next call once Redis is back; the per-key txid makes the replay exact.
Thread-safe (redis-py's connection pool); each state instance has its own client, created on
first use, never pickled.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from stormpy.extras import import_module, require
from stormpy.trident.state.backing import BackingMaker
from stormpy.trident.state.codec import decode_key, decode_value, encode_key, encode_value
from stormpy.trident.state.contract import NON_TRANSACTIONAL, OPAQUE, TRANSACTIONAL, BackingMap
from stormpy.trident.state.map_state import MapStateFactory

log = logging.getLogger(__name__)

DEFAULT_CHUNK_KEYS = 5000
_GLOB_SPECIAL = frozenset("*?[]\\")


# KEYS[1] the guard, KEYS[2..] the keys to set; ARGV[1] "1" = the guard must be absent, else its
# text must equal ARGV[2]; ARGV[3..] the values. MSET per 2000 keys (Lua's unpack has a stack limit).
_PUT_IF_SCRIPT = """
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current then return 0 end
elseif current ~= ARGV[2] then
  return 0
end
local args = {}
for i = 2, #KEYS do
  args[#args + 1] = KEYS[i]
  args[#args + 1] = ARGV[i + 1]
  if #args >= 4000 then
    redis.call('MSET', unpack(args))
    args = {}
  end
end
if #args > 0 then redis.call('MSET', unpack(args)) end
return 1
"""


def key_pattern(prefix: str) -> str:
    """The SCAN MATCH pattern of every key of ``prefix`` and of no other prefix."""
    escaped = "".join("\\" + c if c in _GLOB_SPECIAL else c for c in prefix)
    return escaped + ":[[]*"


class RedisMapState(BackingMap):
    """The BackingMap over the keys ``<prefix>:...`` of the Redis at ``url``.

    ``url`` is a redis-py URL: ``redis://[[user]:password@]host:6379/0``, ``rediss://`` for TLS,
    ``unix:///path/redis.sock?db=0``.
    """

    commit_log = True   # an opaque state keeps its commit log here (state.OPAQUE_LOG_KEY)
    fencing = True      # multi_put_if: owner and fence records (state.Fence), one Lua script call

    def __init__(self, url: str, prefix: str, *, socket_timeout_secs: float = 10.0,
                 chunk_keys: int = DEFAULT_CHUNK_KEYS) -> None:
        if not isinstance(url, str) or "://" not in url:
            raise ValueError(f"RedisMapState url must look like redis://host:6379/0, got {url!r}")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"RedisMapState prefix must be a non-empty string, got {prefix!r}")
        if ":[" in prefix:
            # Keys are "<prefix>:[...": a prefix holding ":[" could end where another's keys begin.
            raise ValueError(f"RedisMapState prefix must not contain ':[', got {prefix!r}")
        self.url = url
        self.prefix = prefix
        self.socket_timeout_secs = float(socket_timeout_secs)
        self.chunk_keys = max(1, int(chunk_keys))
        self._client: Any = None
        self._put_if: Any = None

    @property
    def client(self) -> Any:
        """The redis-py client (created on first use: factories and states travel without it)."""
        if self._client is None:
            redis = import_module("redis", "redis", "RedisMapState")
            from redis.backoff import NoBackoff
            from redis.retry import Retry
            self._client = redis.Redis.from_url(
                self.url, socket_timeout=self.socket_timeout_secs,
                socket_connect_timeout=self.socket_timeout_secs,
                # One immediate retry: a pooled connection that died with a Redis restart fails once
                # and is replaced; while Redis is down the retry fails fast and the call raises.
                retry=Retry(NoBackoff(), 1), retry_on_error=[redis.ConnectionError, redis.TimeoutError])
        return self._client

    def redis_key(self, key: tuple) -> str:
        """The Redis key that holds ``key`` (see the module docstring for the layout)."""
        return self.prefix + ":" + encode_key(key)

    # ------------------------------------------------------------------ BackingMap
    def multi_get(self, keys: list[tuple]) -> list[Any]:
        if not keys:
            return []
        names = [self.redis_key(k) for k in keys]
        if len(names) <= self.chunk_keys:
            raw = self.client.mget(names)
        else:
            pipe = self.client.pipeline(transaction=False)
            for start in range(0, len(names), self.chunk_keys):
                pipe.mget(names[start:start + self.chunk_keys])
            raw = [v for part in pipe.execute() for v in part]
        return [None if v is None else decode_value(v) for v in raw]

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        if not keys:
            return
        mapping = {self.redis_key(k): encode_value(v) for k, v in zip(keys, values)}
        if len(mapping) <= self.chunk_keys:
            self.client.mset(mapping)
            return
        items = list(mapping.items())
        pipe = self.client.pipeline(transaction=True)
        for start in range(0, len(items), self.chunk_keys):
            pipe.mset(dict(items[start:start + self.chunk_keys]))
        pipe.execute()

    def multi_put_if(self, keys: list[tuple], values: list[Any], guard_key: tuple, guard_value: Any) -> bool:
        """One Lua script (atomic in Redis): compare the guard's JSON text, then MSET every key.

        Idempotent like MSET: if redis-py retries it after a lost reply, the retry finds the guard
        changed by its own first run and returns 0; the fence then sees its record landed."""
        if self._put_if is None:
            self._put_if = self.client.register_script(_PUT_IF_SCRIPT)
        expected = "" if guard_value is None else encode_value(guard_value)
        names = [self.redis_key(guard_key), *(self.redis_key(k) for k in keys)]
        args = ["1" if guard_value is None else "0", expected, *(encode_value(v) for v in values)]
        return bool(self._put_if(keys=names, args=args))

    def items(self) -> Iterator[tuple[tuple, Any]]:
        """Every (key, stored value) under the prefix (SCAN, then MGET per 1000 keys)."""
        skip = len(self.prefix) + 1
        batch: list[bytes] = []
        for name in self.client.scan_iter(match=key_pattern(self.prefix), count=1000):
            batch.append(name)
            if len(batch) >= 1000:
                yield from self._items_of(batch, skip)
                batch = []
        if batch:
            yield from self._items_of(batch, skip)

    def _items_of(self, names: list[bytes], skip: int) -> Iterator[tuple[tuple, Any]]:
        for name, value in zip(names, self.client.mget(names)):
            if value is not None:  # deleted between SCAN and MGET
                yield decode_key(name[skip:]), decode_value(value)

    def close(self) -> None:
        client, self._client, self._put_if = self._client, None, None
        if client is not None:
            client.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (self.url, self.prefix, self.socket_timeout_secs, self.chunk_keys))

    # ------------------------------------------------------------------ factories
    @classmethod
    def transactional(cls, url: str, prefix: str, *, cache_size: int = 0) -> MapStateFactory:
        """Stores ``[txid, value]`` per key; a replayed txid is skipped."""
        return cls._factory(url, prefix, TRANSACTIONAL, cache_size)

    @classmethod
    def opaque(cls, url: str, prefix: str, *, cache_size: int = 0) -> MapStateFactory:
        """Stores ``[txid, prev, curr]`` per key; a replayed txid is recomputed from prev."""
        return cls._factory(url, prefix, OPAQUE, cache_size)

    @classmethod
    def non_transactional(cls, url: str, prefix: str, *, cache_size: int = 0) -> MapStateFactory:
        """Stores the bare value; a replayed batch is applied again."""
        return cls._factory(url, prefix, NON_TRANSACTIONAL, cache_size)

    @classmethod
    def _factory(cls, url: str, prefix: str, kind: str, cache_size: int) -> MapStateFactory:
        """``cache_size`` > 0 keeps that many keys per partition in a write-through LRU (CachedMap):
        a batch of known keys then costs one MSET and no MGET."""
        cls(url, prefix)  # validate at build time (connects to nothing)
        return MapStateFactory(BackingMaker(cls, url, prefix, cache_size=cache_size), kind)


def _restore(url: str, prefix: str, socket_timeout_secs: float, chunk_keys: int) -> RedisMapState:
    return RedisMapState(url, prefix, socket_timeout_secs=socket_timeout_secs, chunk_keys=chunk_keys)
