"""A real process cluster for the fault tests: ZooKeeper + Nimbus + N supervisors (+ their workers).

``process_cluster`` (module scope: one cluster per test module, because starting a JVM and
daemons costs seconds on 2 cores) starts

- its own ZooKeeper, ``stormpy dev-zookeeper --config <file>`` (not the session one: tests here
  restart it),
- ``stormpy nimbus --config <file>``,
- ``stormpy supervisor --config <file>`` per supervisor, each with its own ``storm.local.dir``,
  ``storm.log.dir`` and ``supervisor.slots.ports``,
- ``stormpy ui --config <file>``,

with short timings so faults are detected in seconds. Teardown stops the daemons (SIGTERM, then
SIGKILL) and then SIGKILLs every worker process whose ``--conf`` lies under one of this cluster's
local dirs (stopping a supervisor on purpose leaves its workers running), also when a test
failed. On failure the daemon and worker log tails are printed.

The daemon commands are :data:`DAEMON_COMMANDS`; ``test_docker_compose.py`` checks that
``docker-compose.yml`` runs exactly these.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from stormpy.testing import DaemonProcess, free_port, wait_for_leader, wait_until
from stormpy.testing.processes import log_tail
from stormpy.testing.zookeeper import ZooKeeperServer, four_letter_word
from stormpy.tls import zookeeper_server_files

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = Path(__file__).resolve().parent / "topologies"

#: service -> the ``stormpy`` arguments it runs with (before ``--config <file>``).
DAEMON_COMMANDS = {"zookeeper": ["dev-zookeeper"], "nimbus": ["nimbus"], "supervisor": ["supervisor"],
                   "ui": ["ui"]}

#: Timings that make a 2-core test cluster notice faults in seconds.
FAST_TIMINGS: dict[str, Any] = {
    "storm.zookeeper.session.timeout": 6000,
    "storm.zookeeper.connection.timeout": 15000,
    "storm.zookeeper.retry.times": 5,
    "storm.zookeeper.retry.interval": 200,
    "nimbus.monitor.freq.secs": 1,
    "nimbus.task.timeout.secs": 8,
    "nimbus.task.launch.secs": 30,
    "nimbus.supervisor.timeout.secs": 8,
    "supervisor.heartbeat.frequency.secs": 1,
    "supervisor.monitor.frequency.secs": 1,
    "supervisor.sync.freq.secs": 2,
    "supervisor.worker.timeout.secs": 8,
    "supervisor.worker.start.timeout.secs": 60,
    "supervisor.worker.shutdown.sleep.secs": 2,
    "worker.heartbeat.frequency.secs": 1,
    "task.heartbeat.frequency.secs": 1,
    "task.refresh.poll.secs": 2,
    "storm.local.hostname": "127.0.0.1",
}


#: The TLS keys a CLI needs (the daemons' certificate: tests that act as a user write their own).
CLIENT_TLS_KEYS = ("nimbus.thrift.tls.enable", "logviewer.tls.enable", "storm.zookeeper.ssl.enable",
                   "storm.tls.certfile", "storm.tls.keyfile", "storm.tls.cafile")


class ProcessCluster:
    """The running cluster; tests use its helpers and public fault hooks (``kill_*``)."""

    def __init__(self, base: Path, num_supervisors: int, ports_per_supervisor: int,
                 extra_conf: dict[str, Any] | None = None, num_nimbuses: int = 1) -> None:
        self.base = base
        self.log_dir = base / "daemon-logs"
        self.conf: dict[str, Any] = {}
        self.zookeeper: DaemonProcess | None = None
        self.nimbus: DaemonProcess | None = None
        self.ui: DaemonProcess | None = None
        self.supervisors: list[DaemonProcess] = []
        self.num_nimbuses = num_nimbuses
        self.nimbus_ports: list[int] = []
        self.nimbuses: list[DaemonProcess | None] = [None] * num_nimbuses
        self.num_supervisors = num_supervisors
        self.ports_per_supervisor = ports_per_supervisor
        self.extra_conf = dict(extra_conf or {})
        self.started: list[DaemonProcess] = []

    # ------------------------------------------------------------ lifecycle
    def start(self) -> "ProcessCluster":
        self.nimbus_ports = [free_port() for _ in range(self.num_nimbuses)]
        self.conf = {"storm.zookeeper.servers": ["127.0.0.1"], "storm.zookeeper.port": free_port(),
                     "storm.zookeeper.root": "/storm", "dev.zookeeper.path": str(self.base / "zookeeper"),
                     **FAST_TIMINGS, **self.extra_conf,
                     "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": self.nimbus_ports[0], "ui.port": free_port(),
                     "ui.host": "127.0.0.1",
                     "storm.local.dir": str(self.base / "nimbus-local"),
                     "storm.log.dir": str(self.base / "nimbus-logs")}
        if self.num_nimbuses > 1:   # several Nimbus daemons: clients find the leader through the seeds
            self.conf["nimbus.seeds"] = [f"127.0.0.1:{port}" for port in self.nimbus_ports]
        self.start_zookeeper()
        # Nimbus 0, the supervisors and the UI start together (their interpreters start while the
        # others do; supervisors register in ZooKeeper and wait for assignments, the UI shows Nimbus
        # as unavailable until it answers); the other Nimbus daemons only once Nimbus 0 leads, so
        # Nimbus 0 is the leader, as the tests expect.
        nimbus = self._nimbus_process(0)
        nimbus.start()
        for i in range(self.num_supervisors):
            self.add_supervisor(i)
        self.ui = self.daemon("ui", self.conf, "ui").start()
        nimbus.wait_for_port(self.nimbus_ports[0], timeout=60)
        wait_for_leader(self.conf, 60)
        for i in range(1, self.num_nimbuses):
            self.start_nimbus(i, wait_leader=False)
        wait_until(lambda: self._restart_refused_supervisors() and
                   len(self.supervisor_summaries()) >= self.num_supervisors, 60,
                   f"{self.num_supervisors} supervisors registered with Nimbus")
        return self

    def _restart_refused_supervisors(self) -> bool:
        """A supervisor that exited at start (a port free_port chose was taken meanwhile by some
        other connection's ephemeral port) starts again on new ports, at most twice each."""
        for index, proc in enumerate(self.supervisors):
            if proc.is_alive() or proc.returncode is None:
                continue
            retries = getattr(proc, "port_retries", 0)
            if retries >= 2:
                continue
            fresh = self.daemon("supervisor", self.supervisor_conf(index), f"supervisor-{index}-retry{retries + 1}")
            fresh.port_retries = retries + 1   # type: ignore[attr-defined]
            self.supervisors[index] = fresh
            fresh.start()
        return True

    def daemon(self, service: str, conf: dict[str, Any], name: str) -> DaemonProcess:
        proc = DaemonProcess(DAEMON_COMMANDS[service], conf, self.log_dir, name=name, cwd=str(self.base))
        self.started.append(proc)
        return proc

    def start_zookeeper(self) -> DaemonProcess:
        """``stormpy dev-zookeeper`` (again, after :meth:`kill_zookeeper`: same port, same data)."""
        if self.zookeeper is None:
            self.zookeeper = self.daemon("zookeeper", self.conf, "zookeeper")
        self.zookeeper.start()
        port = self.conf["storm.zookeeper.port"]
        probe = None
        if self.conf.get("storm.zookeeper.ssl.enable"):     # TLS only: the probe shows the cluster's certificate
            probe = ZooKeeperServer("/nonexistent", port, tls=zookeeper_server_files(self.conf)).probe_context()
        self.zookeeper.wait_ready(lambda: four_letter_word("127.0.0.1", port, "ruok", tls=probe) == "imok", 90,
                                  f"ZooKeeper to answer on port {port}")
        return self.zookeeper

    def kill_zookeeper(self) -> None:
        """Fault hook: SIGKILL the ZooKeeper server (the JVM the dev-zookeeper command runs)."""
        assert self.zookeeper is not None and self.zookeeper.pid is not None
        for child in psutil.Process(self.zookeeper.pid).children(recursive=True):
            child.kill()
        # dev-zookeeper exits once its server is gone; then start() can run it again
        wait_until(lambda: not self.zookeeper.is_alive(), 30, "dev-zookeeper to notice its server died")

    def nimbus_conf(self, index: int) -> dict[str, Any]:
        if index == 0:
            return self.conf
        return {**self.conf, "nimbus.thrift.port": self.nimbus_ports[index],
                "storm.local.dir": str(self.base / f"nimbus-{index}-local"),
                "storm.log.dir": str(self.base / f"nimbus-{index}-logs")}

    def nimbus_host_port(self, index: int) -> str:
        return f"127.0.0.1:{self.nimbus_ports[index]}"

    def start_nimbus(self, index: int = 0, wait_leader: bool = True) -> DaemonProcess:
        """Start (again) Nimbus ``index``; with ``wait_leader``, wait until some Nimbus leads."""
        proc = self._nimbus_process(index)
        proc.start()
        proc.wait_for_port(self.nimbus_ports[index], timeout=60)
        if wait_leader:
            wait_for_leader(self.conf, 60)
        return proc

    def _nimbus_process(self, index: int) -> DaemonProcess:
        proc = self.nimbuses[index]
        if proc is None:
            proc = self.nimbuses[index] = self.daemon("nimbus", self.nimbus_conf(index),
                                                      "nimbus" if index == 0 else f"nimbus-{index}")
        if index == 0:
            self.nimbus = proc
        return proc

    def supervisor_conf(self, index: int) -> dict[str, Any]:
        return {**self.conf, "storm.local.dir": str(self.base / f"supervisor-{index}" / "local"),
                "storm.log.dir": str(self.base / f"supervisor-{index}" / "logs"),
                "supervisor.slots.ports": [free_port() for _ in range(self.ports_per_supervisor)],
                "logviewer.port": free_port()}

    def add_supervisor(self, index: int) -> DaemonProcess:
        proc = self.daemon("supervisor", self.supervisor_conf(index), f"supervisor-{index}")
        self.supervisors.append(proc)
        return proc.start()

    def restart_supervisor(self, index: int) -> DaemonProcess:
        """Start supervisor ``index`` again with the same config (same local dir: adoption)."""
        proc = self.supervisors[index]
        if proc.is_alive():
            proc.stop(reason="restart requested")
        return proc.start()

    def stop(self) -> None:
        """SIGTERM every daemon but ZooKeeper at once and wait for them together (SIGKILL after 10 s),
        then stop ZooKeeper, so that the daemons close their sessions while it still answers."""
        daemons = [p for p in reversed(self.started) if p is not self.zookeeper and p.is_alive()]
        for proc in daemons:
            proc.kill(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in daemons:
            try:
                proc.proc.wait(timeout=max(0.0, deadline - time.monotonic()))   # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                proc.kill(signal.SIGKILL)
        if self.zookeeper is not None:
            self.zookeeper.stop(reason="cluster teardown", grace_secs=10)
        for pid in self.worker_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.worker_pids():
            try:
                psutil.Process(pid).wait(10)
            except (psutil.NoSuchProcess, psutil.TimeoutExpired):
                pass

    # ------------------------------------------------------------ topologies
    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``stormpy <args> --config <nimbus conf>`` like a user would; raises on failure."""
        conf_file = self.log_dir / "client.yaml"
        conf_file.parent.mkdir(parents=True, exist_ok=True)
        conf_file.write_text(json.dumps({k: self.conf[k] for k in (
            "storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root", "nimbus.seeds",
            "nimbus.thrift.port", "storm.thrift.auth.secret.file", *CLIENT_TLS_KEYS) if k in self.conf}))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        result = subprocess.run([sys.executable, "-m", "stormpy.cli", *args, "--config", str(conf_file)],
                                capture_output=True, text=True, timeout=timeout, env=env, cwd=str(self.base))
        if result.returncode != 0:
            raise AssertionError(f"stormpy {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def submit(self, topology_file: str, name: str, workers: int, conf: dict[str, Any]) -> str:
        """Submit ``tests/cluster/topologies/<file>`` and return its topology id."""
        args = ["submit", str(TOPOLOGIES / topology_file), "--name", name, "--workers", str(workers)]
        for key, value in conf.items():
            args += ["-c", f"{key}={json.dumps(value)}"]
        self.cli(*args)
        return wait_until(lambda: self.topology_id(name), 30, f"topology {name} to be listed")

    def client(self) -> Any:
        from stormpy.client.nimbus_client import connect

        return connect(self.conf)

    def topology_id(self, name: str) -> str | None:
        with self.client() as c:
            for topo in c.getClusterInfo().topologies:
                if topo.name == name:
                    return topo.id
        return None

    def topology_info(self, topology_id: str) -> Any:
        with self.client() as c:
            return c.getTopologyInfo(topology_id)

    def supervisor_summaries(self) -> list[Any]:
        try:
            with self.client() as c:
                return list(c.getClusterInfo().supervisors)
        except Exception:  # noqa: BLE001 - Nimbus may be restarting
            return []

    def kill_topology(self, name: str, wait_secs: int = 0) -> None:
        self.cli("kill", name, "-w", str(wait_secs))

    # ------------------------------------------------------------ workers
    def local_dirs(self) -> list[str]:
        return [str(self.base / f"supervisor-{i}" / "local") for i in range(len(self.supervisors))]

    def worker_processes(self, topology_id: str | None = None, supervisor: int | None = None) -> list[psutil.Process]:
        """Live worker processes of this cluster (optionally one topology's / one supervisor's)."""
        dirs = self.local_dirs() if supervisor is None else [self.local_dirs()[supervisor]]
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            try:
                cmd = proc.info["cmdline"] or []
                if proc.info["status"] == psutil.STATUS_ZOMBIE or "stormpy.worker" not in cmd:
                    continue
                conf = cmd[cmd.index("--conf") + 1] if "--conf" in cmd else ""
                if not any(conf.startswith(d + os.sep) for d in dirs):
                    continue
                if topology_id is not None and topology_id not in cmd:
                    continue
                found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, IndexError):
                continue
        return found

    def worker_pids(self, topology_id: str | None = None, supervisor: int | None = None) -> list[int]:
        return sorted(p.pid for p in self.worker_processes(topology_id, supervisor))

    def wait_workers(self, topology_id: str, count: int, timeout: float = 90) -> list[int]:
        return wait_until(lambda: (pids := self.worker_pids(topology_id)) and len(pids) == count and pids,
                          timeout, f"{count} worker process(es) of {topology_id}")

    def report(self) -> str:
        parts = [f"--- {p.name} ({p.output_path}) ---\n{p.log_tail(80)}" for p in self.started]
        for i in range(len(self.supervisors)):
            for log in sorted((self.base / f"supervisor-{i}" / "logs").glob("workers-artifacts/*/*/worker.log")):
                parts.append(f"--- {log} ---\n{log_tail(log, 60)}")
        return "\n".join(parts)


@contextlib.contextmanager
def module_cluster(request: Any, base: Path, supervisors: int, ports: int, conf: dict[str, Any] | None = None,
                   nimbuses: int = 1) -> Iterator[ProcessCluster]:
    """A started ProcessCluster for one test module, stopped (workers too) even on failure; its
    logs are printed when the start or any test of the session failed."""
    cluster = ProcessCluster(base, supervisors, ports, conf, nimbuses)
    failed = False
    try:
        cluster.start()
        yield cluster
        failed = request.session.testsfailed > 0
    except BaseException:
        failed = True
        raise
    finally:
        if failed:
            print(f"\n==== cluster logs ({cluster.base}) ====\n{cluster.report()}")
        cluster.stop()


def print_logs_if_failed(cluster: ProcessCluster, request: Any) -> None:
    """After one test: the cluster's logs when that test failed (the per-test ``cluster`` fixtures)."""
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\n==== cluster logs for {request.node.nodeid} ====\n{cluster.report()}")
