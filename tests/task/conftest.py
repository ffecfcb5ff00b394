"""Fixtures for engine tests: topologies run in-process with real executor threads.

``local_topology(TopologyClass, **conf)`` starts a LocalTopology and stops it at teardown
(also when the test failed); ``wait_until(pred, timeout, what)`` is the only way tests wait.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stormpy.local.runner import LocalTopology
from stormpy.testing import wait_until


@pytest.fixture
def waiter() -> Callable[..., Any]:
    """``stormpy.testing.wait_until`` polling every 20 ms: these waits are for in-process threads."""
    return functools.partial(wait_until, interval=0.02)


@pytest.fixture
def local_topology() -> Iterator[Callable[..., LocalTopology]]:
    started: list[LocalTopology] = []

    def start(topology_cls: type, name: str = "test", active: bool = True, **conf: Any) -> LocalTopology:
        local = LocalTopology(topology_cls, name, user_overrides=conf)
        started.append(local)
        return local.start(active=active)

    before = set(threading.enumerate())
    yield start
    for local in started:
        local.stop(drain_secs=0)
    leaked = [t for t in threading.enumerate() if t not in before and t.name.startswith("executor-")]
    assert not leaked, f"executor threads still running after stop: {[t.name for t in leaked]}"
