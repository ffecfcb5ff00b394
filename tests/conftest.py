"""Shared fixtures: one real ZooKeeper per test session, one chroot per test, daemon processes.

Nothing here is mocked: ``zookeeper`` is a real server started from the pyspark wheel's jars
on a free port (once per session, because a JVM start costs seconds on 2 cores), and each test
gets its own chroot (``zk_root``) so tests never see each other's state. ``daemons`` starts
stormpy daemons as subprocesses and stops them all at teardown, also when the test failed,
printing their log tails on failure.
"""
from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy.testing import DaemonProcess, ZooKeeperServer, ZooKeeperUnavailable, free_port
from stormpy.testing.processes import tear_down_on_sigterm

tear_down_on_sigterm()   # a killed run (CI time limit) still stops what its tests started


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    """Remember each phase's report on the item, so fixtures can tell whether the test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def _test_failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper server for the whole session (tickTime 500 ms so short sessions work)."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), tick_time_ms=500)
    try:
        server.start(timeout=90)
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"cannot start the test ZooKeeper: {exc}")
    try:
        yield server
    finally:
        server.stop(reason="test session finished")


@pytest.fixture
def zk_root(request: pytest.FixtureRequest) -> str:
    """A chroot unique to this test, e.g. ``/t/test_submit-3f2a9c1b`` (created on first connect)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    return f"/t/{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def zk_conf(zookeeper: ZooKeeperServer, zk_root: str) -> dict[str, Any]:
    """Config keys pointing at the session ZooKeeper under this test's chroot, short timeouts;
    Trident's transactional state gets a root of its own next to it (``<chroot>-transactional``)."""
    return {**zookeeper.client_conf(zk_root),
            "transactional.zookeeper.root": f"{zk_root}-transactional",
            "storm.zookeeper.session.timeout": 4000,
            "storm.zookeeper.connection.timeout": 5000,
            "storm.zookeeper.retry.times": 3,
            "storm.zookeeper.retry.interval": 200}


@pytest.fixture
def cluster_conf(zk_conf: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """A whole-cluster config for this test: its chroot, its own local/log dirs, a free Nimbus port,
    and fast Nimbus timings (monitor every second, executors time out after 3 s)."""
    return {**zk_conf,
            "storm.local.dir": str(tmp_path / "storm-local"),
            "storm.log.dir": str(tmp_path / "logs"),
            "nimbus.seeds": ["127.0.0.1"],
            "nimbus.thrift.port": free_port(),
            "nimbus.monitor.freq.secs": 1,
            "nimbus.task.timeout.secs": 3,
            "nimbus.task.launch.secs": 3,
            "nimbus.supervisor.timeout.secs": 5,
            "storm.local.hostname": "127.0.0.1"}


class Daemons:
    """Starts stormpy daemons for one test and stops every one of them at teardown."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[DaemonProcess] = []

    def start(self, command: str, conf: dict[str, Any], *, name: str | None = None,
              ready_port: int | None = None, timeout: float = 60.0, **kwargs: Any) -> DaemonProcess:
        """Start ``stormpy <command>`` with ``conf``; wait for ``ready_port`` to listen if given."""
        count = sum(1 for d in self.started if d.name.startswith(name or command))
        daemon = DaemonProcess(command, conf, self.log_dir, name=f"{name or command}-{count}", **kwargs)
        self.started.append(daemon)
        daemon.start()
        if ready_port is not None:
            daemon.wait_for_port(ready_port, timeout=timeout)
        return daemon

    def stop_all(self, reason: str) -> None:
        for daemon in reversed(self.started):
            daemon.stop(reason=reason)

    def report(self) -> str:
        return "\n".join(f"--- {d.name} ({d.output_path}) ---\n{d.log_tail(60)}" for d in self.started)


@pytest.fixture
def daemons(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemons]:
    """Per-test daemon starter; on failure the daemons' log tails are printed."""
    group = Daemons(tmp_path / "daemon-logs")
    try:
        yield group
    finally:
        group.stop_all(reason="test teardown")
        if _test_failed(request) and group.started:
            print(f"\n==== daemon logs for {request.node.nodeid} ====\n{group.report()}")


@pytest.fixture(autouse=True)
def _no_host_local_dir() -> Iterator[None]:
    """A Worker built in a test's process names its supervisor's storm.local.dir process-wide
    (``stormpy.disk_layout.set_host_local_dir``); the next test must not inherit it."""
    from stormpy import disk_layout

    yield
    disk_layout._host_local_dir = disk_layout._worker_state_dir = None


@pytest.fixture(autouse=True)
def _no_stray_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not pick up a developer's STORM_CONF_DIR or similar from the shell."""
    for name in list(os.environ):
        if name.startswith("STORMPY_"):
            monkeypatch.delenv(name, raising=False)
