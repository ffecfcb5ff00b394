"""stormpy.redis: Redis Streams spouts (client: redis-py, a core dependency).

- :class:`RedisStreamSpout`: a core spout over a consumer group (``XREADGROUP``/``XACK``, a dead
  task's pending entries re-claimed with ``XAUTOCLAIM``): at least once.
- :class:`OpaqueRedisStreamSpout`: a Trident opaque spout over stream ids: exactly once with an
  opaque state.

Trident's Redis map state stays ``stormpy.trident.RedisMapState``.
"""
from __future__ import annotations

from stormpy.redis.streams import OpaqueRedisStreamSpout, RedisStreamSpout

__all__ = ["RedisStreamSpout", "OpaqueRedisStreamSpout"]
