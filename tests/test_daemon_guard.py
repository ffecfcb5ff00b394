"""Start-up safety: directory locks, taken ports, unknown config keys, ZooKeeper down.

The lock and port cases run real ``stormpy`` daemon processes against the session ZooKeeper:
the acceptance case is two supervisors on one ``storm.local.dir`` (the second exits 1 with one
line; the first keeps its id and its ZooKeeper node).
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from stormpy.cluster_state import ClusterState
from stormpy.config import unknown_keys, warn_unknown_keys
from stormpy.daemon_guard import DaemonLock, ThreadGuard, check_ports_free, local_dir_lock
from stormpy.errors import UserError
from stormpy.supervisor import localstate
from stormpy.testing import free_port, wait_until

REPO = Path(__file__).resolve().parents[1]


def _stormpy(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "stormpy.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(cwd))


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("stormpy: error:")]


# ---------------------------------------------------------------- pure parts

def test_second_lock_on_a_directory_is_refused_and_freed_when_the_holder_dies(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from stormpy.daemon_guard import local_dir_lock; "
        f"local_dir_lock({str(tmp_path)!r}, 'supervisor').acquire(); print('locked', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(UserError) as err:
            local_dir_lock(tmp_path, "supervisor").acquire()
        assert f"another supervisor (pid {holder.pid}) is already running with storm.local.dir" in str(err.value)
        with local_dir_lock(tmp_path, "nimbus"):         # another kind shares the dir
            pass
    finally:
        holder.kill()
        holder.wait(10)
    with local_dir_lock(tmp_path, "supervisor") as lock:  # the kernel dropped the dead holder's lock
        assert (tmp_path / "supervisor" / "daemon.lock").read_text().strip() == str(os.getpid())
        assert isinstance(lock, DaemonLock)


def test_taken_port_is_named_with_its_key() -> None:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(UserError, match=rf"supervisor cannot use port {port} \(logviewer.port\): "
                                            r"address already in use"):
            check_ports_free("supervisor", [(free_port(), "supervisor.slots.ports"), (port, "logviewer.port")])


def test_unknown_keys_in_checked_namespaces_get_one_warning_with_the_closest_key(caplog: pytest.LogCaptureFixture) -> None:
    assert unknown_keys(["nimbus.thrif.port", "my.own.key", "spark.sql.shuffle.partitions", "topology.tasks",
                         "topology.workers", "logviewer.prot"]) == [
        ("nimbus.thrif.port", "nimbus.thrift.port"), ("logviewer.prot", "logviewer.port")]
    with caplog.at_level(logging.WARNING):
        first = warn_unknown_keys(["supervisor.slot.ports", "wordcount.output"])
        again = warn_unknown_keys(["supervisor.slot.ports"])
    assert first == ["unknown config key 'supervisor.slot.ports' (did you mean supervisor.slots.ports?)"]
    assert again == []
    assert [r.getMessage() for r in caplog.records].count(first[0]) == 1


def test_cli_and_topology_config_warn_about_typos(tmp_path: Path) -> None:
    topo = tmp_path / "typo_topo.py"
    topo.write_text(
        "from stormpy import Bolt, Spout, Topology\n"
        "class S(Spout):\n    outputs = ['x']\n    def next_tuple(self):\n        pass\n"
        "class T(Topology):\n    config = {'topology.max.spout.pendng': 10, 'my.app.key': 1}\n    s = S.spec()\n")
    result = _stormpy("local", str(topo), "--duration", "1", "-c", "topology.mesage.timeout.secs=3",
                      "-c", "app.threshold=5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "unknown config key" in line]
    assert len(warnings) == 2, result.stderr
    assert "'topology.mesage.timeout.secs' (did you mean topology.message.timeout.secs?)" in warnings[0]
    assert "'topology.max.spout.pendng' (did you mean topology.max.spout.pending?)" in warnings[1]
    assert "my.app.key" not in result.stderr and "app.threshold" not in result.stderr


# ---------------------------------------------------------------- real daemons

def _supervisor_conf(zk_conf: dict, local: Path, logs: Path) -> dict:
    return {**zk_conf, "storm.local.dir": str(local), "storm.log.dir": str(logs),
            "storm.local.hostname": "127.0.0.1", "supervisor.slots.ports": [free_port()],
            "logviewer.port": free_port(), "supervisor.heartbeat.frequency.secs": 1,
            "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": free_port()}


def test_second_supervisor_on_the_same_local_dir_exits_1_and_the_first_keeps_its_id(daemons, zk_conf, tmp_path):
    local = tmp_path / "local"
    first_conf = _supervisor_conf(zk_conf, local, tmp_path / "logs")
    first = daemons.start("supervisor", first_conf, name="first", ready_port=first_conf["logviewer.port"])
    state = ClusterState(zk_conf)
    try:
        first_id = wait_until(lambda: localstate.LocalState(local).supervisor_id(), 30, "the first supervisor's id")
        wait_until(lambda: first_id in state.supervisors(), 30, "the first supervisor in ZooKeeper")
        second_conf = {**_supervisor_conf(zk_conf, local, tmp_path / "logs-2")}
        second = daemons.start("supervisor", second_conf, name="second")
        wait_until(lambda: not second.is_alive(), 60, "the second supervisor to exit")
        assert second.returncode == 1
        errors = _error_lines(second.output())
        assert errors == [f"stormpy: error: another supervisor (pid {first.pid}) is already running with "
                          f"storm.local.dir {local.resolve()}; stop it or give this supervisor its own "
                          "storm.local.dir"], second.output()
        assert first.is_alive()
        assert localstate.LocalState(local).supervisor_id() == first_id
        assert list(state.supervisors()) == [first_id]
        assert not (tmp_path / "logs-2" / "supervisor.log").exists()    # refused before logging anywhere
    finally:
        state.close()


def test_supervisor_and_nimbus_refuse_taken_ports(zk_conf, tmp_path):
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        result = _stormpy("supervisor", "-c", f"storm.local.dir={tmp_path / 'sup'}", "-c", f"logviewer.port={taken}",
                          "-c", f"storm.zookeeper.port={zk_conf['storm.zookeeper.port']}", cwd=tmp_path)
        assert result.returncode == 1
        assert _error_lines(result.stderr) == [
            f"stormpy: error: supervisor cannot use port {taken} (logviewer.port): address already in use "
            "(another daemon running? set logviewer.port)"], result.stderr
        assert not (tmp_path / "sup" / "supervisor" / "localstate").exists()
        result = _stormpy("nimbus", "-c", f"storm.local.dir={tmp_path / 'nim'}", "-c", f"nimbus.thrift.port={taken}",
                          cwd=tmp_path)
        assert result.returncode == 1
        assert _error_lines(result.stderr) == [
            f"stormpy: error: Nimbus cannot use port {taken} (nimbus.thrift.port): address already in use "
            "(another daemon running? set nimbus.thrift.port)"], result.stderr


def test_zookeeper_down_gives_one_retry_line_then_the_error(tmp_path: Path) -> None:
    port = free_port()
    result = _stormpy("supervisor", "-c", f"storm.zookeeper.port={port}", "-c", "storm.zookeeper.connection.timeout=3000",
                      "-c", f"logviewer.port={free_port()}", "-c", f"supervisor.slots.ports=[{free_port()}]",
                      cwd=tmp_path)
    assert result.returncode == 1
    assert _error_lines(result.stderr) == [f"stormpy: error: cannot reach ZooKeeper at localhost:{port} within 3s "
                                           "(storm.zookeeper.servers / storm.zookeeper.port)"], result.stderr
    kazoo_lines = [line for line in result.stderr.splitlines() if "kazoo" in line]
    assert len(kazoo_lines) <= 1, result.stderr


# ---------------------------------------------------------------- ThreadGuard: no thread dies silently (issue 26, item 7)

class _Reports:
    def __init__(self) -> None:
        self.reports: list[tuple[str, str]] = []
        self.fatal: list[str] = []

    def guard(self, **kwargs: Any) -> ThreadGuard:
        return ThreadGuard("test worker", report=lambda thread, text: self.reports.append((thread, text)),
                           on_fatal=self.fatal.append, backoff_secs=0.02, **kwargs)


def test_guard_reports_a_failure_and_restarts_the_body() -> None:
    seen = _Reports()
    guard = seen.guard()
    calls: list[int] = []
    done = threading.Event()

    def body() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("injected")
        done.set()

    thread = guard.start_thread("worker-loop", body)
    assert done.wait(10), "the body ran again after its failure"
    thread.join(5)
    assert not thread.is_alive()                      # it returned normally: the thread ends
    assert len(seen.reports) == 1 and seen.reports[0][0] == "worker-loop"
    assert "KeyError: 'injected'" in seen.reports[0][1] and "restarted" in seen.reports[0][1]
    assert guard.restarts == {"worker-loop": 1} and seen.fatal == []


def test_guard_gives_up_after_too_many_failures_and_calls_on_fatal_once() -> None:
    seen = _Reports()
    guard = seen.guard(max_failures=5, window_secs=60)
    calls: list[int] = []

    def always_broken() -> None:
        calls.append(1)
        raise RuntimeError("framework bug")

    thread = guard.start_thread("send", always_broken)
    thread.join(10)
    assert not thread.is_alive(), "the guard stopped restarting the body"
    assert len(calls) == 5                            # 4 failures are retried, the 5th is fatal
    assert len(seen.fatal) == 1 and "5 framework thread failures within 60s" in seen.fatal[0]
    assert "RuntimeError: framework bug" in seen.fatal[0]
    assert any("giving up" in text for _, text in seen.reports)
    # other threads of the same guard are not restarted either once it gave up
    other: list[int] = []
    guard.start_thread("recv", lambda: (other.append(1), 1 / 0)).join(5)
    assert other == [1] and len(seen.fatal) == 1


def test_guard_uncounted_failures_are_reported_but_never_fatal() -> None:
    seen = _Reports()
    guard = seen.guard(max_failures=2)
    for _ in range(10):
        assert guard.failed("heartbeat", OSError("ZooKeeper away"), count=False)
    assert len(seen.reports) == 10 and seen.fatal == []
    assert guard.failed("refresh", RuntimeError("a bug"))
    assert not guard.failed("refresh", RuntimeError("a bug"))   # the 2nd of max_failures=2
    assert len(seen.fatal) == 1


def test_guard_stop_ends_restarts_and_a_reporter_failure_does_not_kill_the_thread() -> None:
    def bad_report(thread: str, text: str) -> None:
        raise ConnectionError("ZooKeeper away")

    guard = ThreadGuard("test", report=bad_report, backoff_secs=0.02)
    calls: list[int] = []
    done = threading.Event()

    def body() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise ValueError("injected")
        done.set()

    guard.start_thread("loop", body)
    assert done.wait(10)
    guard.stop()
    ended: list[int] = []
    guard.start_thread("late", lambda: (ended.append(1), 1 / 0)).join(5)
    assert ended == [1], "a stopping guard does not restart"


def test_heartbeat_failure_is_reported_once_per_streak_and_the_beat_recovers() -> None:
    from stormpy.worker.heartbeat import Heart

    seen = _Reports()
    guard = seen.guard(max_failures=1)
    calls: list[int] = []
    done = threading.Event()

    def beat() -> None:
        calls.append(1)
        if len(calls) <= 4:
            raise OSError("injected: disk full")
        done.set()

    heart = Heart("local-heartbeat", 0.05, beat, guard=guard).start()
    try:
        assert done.wait(10), "the heart beat again after the failures"
        assert [thread for thread, _ in seen.reports] == ["local-heartbeat"]
        assert "disk full" in seen.reports[0][1] and seen.fatal == []
    finally:
        heart.stop()


class _FlakyActivation:
    """The runtime part the refresh thread drives; its first ``set_active`` raises."""

    def __init__(self) -> None:
        self.calls: list[bool] = []

    def set_active(self, active: bool) -> None:
        self.calls.append(active)
        if len(self.calls) == 1:
            raise RuntimeError("injected: could not pause the spouts")


def test_refresh_failure_is_reported_and_the_next_poll_recovers(zk_conf: dict[str, Any]) -> None:
    """The worker's refresh thread against a real ZooKeeper: the topology has no StormBase
    (gone), so spouts must pause; the first attempt fails, is reported, the next poll works."""
    from stormpy.worker.worker import Worker

    seen = _Reports()
    worker = Worker({**zk_conf, "task.refresh.poll.secs": 0.1}, "gone-1-1", "sup-1", free_port(), "w-1")
    worker.guard = seen.guard()
    worker.state = ClusterState(zk_conf)
    worker.runtime = _FlakyActivation()
    thread = worker.guard.start_thread("refresh", worker._refresh_loop)
    try:
        wait_until(lambda: len(worker.runtime.calls) >= 2, 20, "a second refresh after the failed one")
        assert worker._active is False
        assert [thread for thread, _ in seen.reports] == ["refresh"]
        assert "could not pause the spouts" in seen.reports[0][1] and seen.fatal == []
    finally:
        worker._stop.set()
        worker._refresh_wanted.set()
        thread.join(5)
        worker.state.close()


# ---------------------------------------------------------------- open ports say so (issue 26, item 4)

def test_warn_if_open_only_beyond_loopback_and_only_with_security_off(caplog: pytest.LogCaptureFixture) -> None:
    from stormpy.daemon_guard import EXPOSURES, is_loopback, warn_if_open

    assert is_loopback("127.0.0.1") and is_loopback("127.0.1.1") and is_loopback("::1") and is_loopback("localhost")
    assert not any(is_loopback(h) for h in ("0.0.0.0", "*", "", None, "10.0.0.5", "storm-host"))
    with caplog.at_level(logging.WARNING, logger="stormpy.daemon_guard"):
        for daemon in EXPOSURES:
            assert not warn_if_open(daemon, "127.0.0.1", 1234, secured=False)
            assert not warn_if_open(daemon, "0.0.0.0", 1234, secured=True)
            assert warn_if_open(daemon, "*", 1234, secured=False)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == len(EXPOSURES)
    assert all(line.startswith("SECURITY: ") and "security off" in line and "\n" not in line for line in lines)
    nimbus = next(line for line in lines if line.startswith("SECURITY: Nimbus"))
    assert "every interface port 1234" in nimbus and "runs on every supervisor" in nimbus
    assert "storm.thrift.auth.secret.file" in nimbus


def test_nimbus_on_every_interface_without_a_secret_logs_one_security_warning(daemons, cluster_conf) -> None:
    conf = {k: v for k, v in cluster_conf.items() if k != "storm.local.hostname"}   # binds 0.0.0.0
    nimbus = daemons.start("nimbus", conf, ready_port=conf["nimbus.thrift.port"])
    wait_until(lambda: "SECURITY: Nimbus" in nimbus.output(), 30, "Nimbus's security warning")
    lines = [line for line in nimbus.output().splitlines() if "SECURITY:" in line]
    assert len(lines) == 1 and "WARNING" in lines[0] and f"port {conf['nimbus.thrift.port']}" in lines[0]


def test_guard_a_thread_that_cannot_restart_and_ends_by_an_exception_is_fatal_at_once() -> None:
    """An executor thread (restart=False) ended by SystemExit from user code: nobody runs its
    tasks any more, so the worker must end (and be restarted), not stall."""
    seen = _Reports()
    guard = seen.guard(max_failures=5)
    guard.start_thread("executor-bolt[2-2]", lambda: sys.exit("user code called sys.exit()"),
                       restart=False).join(5)
    assert seen.fatal == ["thread executor-bolt[2-2] ended by SystemExit: user code called sys.exit()"]
    guard2 = seen.guard()
    guard2.stop()   # the same during shutdown is no news
    guard2.start_thread("executor-bolt[3-3]", lambda: sys.exit(0), restart=False).join(5)
    assert len(seen.fatal) == 1


def test_readme_first_screen_says_what_an_open_cluster_means() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    first_screen = "\n".join(lines[:15])
    assert lines[0] == "```bash" and "Security is off by default" in first_screen
    for exposure in ("6627", "code runs on every supervisor", "2181", "rewrite assignments",
                     "worker port", "forge acks", "$commit", "backpressure", "SECURITY:"):
        assert exposure in first_screen, exposure
