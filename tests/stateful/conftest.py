"""Stateful-bolt test fixtures: the Trident tests' real Redis server and per-test key prefix."""
from __future__ import annotations

from trident.conftest import redis_prefix, redis_server  # noqa: F401  (fixtures, reused as they are)
