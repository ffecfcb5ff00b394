"""A real Spark standalone cluster and a Spark Connect server, started from the pyspark wheel.

The pyspark wheel carries Spark's launch scripts (``bin/spark-class``, ``bin/spark-submit``) and
every jar a standalone master, worker and the Spark Connect server need, so tests and
benchmarks run the same daemons a company's Spark cluster runs, with Java 17 and nothing else:

- ``SparkStandalone(base_dir, workers=2)``: ``org.apache.spark.deploy.master.Master`` and N
  ``org.apache.spark.deploy.worker.Worker`` processes on 127.0.0.1; ``master_url`` is the
  ``spark://`` URL for ``spark.master``. ``start()`` returns when every worker has registered.
- ``SparkConnectServer(base_dir, master=...)``: ``SparkConnectServer`` through ``spark-submit``
  (its own driver, on ``local[N]`` or a standalone master); ``remote`` is the ``sc://`` URL for
  ``spark.remote``. ``start()`` returns when the gRPC port accepts connections.

Each daemon logs to ``<base_dir>/<name>.out``; ``stop()`` ends them (SIGTERM, bounded wait,
SIGKILL, reap), and an atexit hook stops whatever a crashed test left running. Every failure
message carries the daemon's log tail. Called from one thread (a fixture or a benchmark).
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stormpy.testing.processes import free_port, log_tail, port_open, stop_process

log = logging.getLogger(__name__)

_RUNNING: "weakref.WeakSet[_SparkDaemons]" = weakref.WeakSet()
HOST = "127.0.0.1"


class SparkUnavailable(RuntimeError):
    """pyspark (or Java) is missing, or a Spark daemon would not start; the message says which."""


def spark_home() -> Path:
    """The pyspark wheel's directory: it is a SPARK_HOME (bin/, jars/)."""
    try:
        import pyspark
    except ImportError:
        raise SparkUnavailable("a Spark cluster for tests needs pyspark: pip install -e '.[test]'") from None
    return Path(pyspark.__file__).resolve().parent


def _spark_env(home: Path, base: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST, "SPARK_LOG_DIR": str(base),
                "SPARK_WORKER_DIR": str(base / "work"), "SPARK_LOCAL_DIRS": str(base / "local"),
                "SPARK_NO_DAEMONIZE": "1", "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable)})
    return env


class _SparkDaemons:
    """The processes of one test Spark deployment, stopped together."""

    def __init__(self, base_dir: str | os.PathLike[str]) -> None:
        self.base = Path(base_dir).resolve()
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def _launch(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        home = spark_home()
        self.base.mkdir(parents=True, exist_ok=True)
        for sub in ("work", "local"):
            (self.base / sub).mkdir(exist_ok=True)
        with open(self.base / f"{name}.out", "ab") as out:
            proc = subprocess.Popen([str(home / "bin" / argv[0]), *argv[1:]], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=_spark_env(home, self.base), cwd=self.base,
                                    start_new_session=True)
        self.procs.append((name, proc))
        _RUNNING.add(self)
        log.info("started Spark %s (pid %d)", name, proc.pid)
        return proc

    def _wait(self, name: str, proc: subprocess.Popen[bytes], ready: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SparkUnavailable(f"Spark {name} exited with code {proc.returncode} before {what}:\n"
                                       f"{log_tail(self.base / f'{name}.out')}")
            if ready():
                return
            time.sleep(0.3)
        raise SparkUnavailable(f"timed out after {timeout:g}s waiting for {what}:\n{log_tail(self.base / f'{name}.out')}")

    def stop(self, reason: str = "test finished") -> None:
        """Stop every daemon, newest first (workers before their master)."""
        while self.procs:
            name, proc = self.procs.pop()
            stop_process(proc, f"Spark {name}", reason, grace_secs=15)
        _RUNNING.discard(self)

    def __enter__(self) -> Any:
        return self.start()  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        self.stop("context closed")


class SparkStandalone(_SparkDaemons):
    """A standalone master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1."""

    def __init__(self, base_dir: str | os.PathLike[str], workers: int = 2, cores: int = 1,
                 memory: str = "1g") -> None:
        super().__init__(base_dir)
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port, self.ui_port = free_port(HOST), free_port(HOST)

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE (from its web UI's JSON)."""
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=2) as reply:
                state = json.loads(reply.read())
        except (OSError, ValueError):
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def start(self, timeout: float = 120.0) -> "SparkStandalone":
        master = self._launch("master", ["spark-class", "org.apache.spark.deploy.master.Master", "--host", HOST,
                                         "--port", str(self.port), "--webui-port", str(self.ui_port)])
        self._wait("master", master, lambda: port_open(HOST, self.port), f"the master on {self.master_url}", timeout)
        for index in range(self.workers):
            work = self.base / f"worker-{index}"
            work.mkdir(exist_ok=True)
            self._launch(f"worker-{index}", [
                "spark-class", "org.apache.spark.deploy.worker.Worker", "--host", HOST, "--cores", str(self.cores),
                "--memory", self.memory, "--webui-port", str(free_port(HOST)), "--work-dir", str(work),
                self.master_url])
        self._wait("master", master, lambda: self.alive_workers() >= self.workers,
                   f"{self.workers} workers registered with {self.master_url}", timeout)
        log.info("Spark standalone cluster ready: %s with %d workers", self.master_url, self.workers)
        return self


class SparkConnectServer(_SparkDaemons):
    """A Spark Connect server whose driver runs on ``master`` (``local[2]`` or a ``spark://`` URL)."""

    def __init__(self, base_dir: str | os.PathLike[str], master: str = "local[2]",
                 conf: dict[str, str] | None = None) -> None:
        super().__init__(base_dir)
        self.master = master
        self.port = free_port(HOST)
        self.conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **(conf or {})}

    @property
    def remote(self) -> str:
        return f"sc://{HOST}:{self.port}"

    def start(self, timeout: float = 180.0) -> "SparkConnectServer":
        argv = ["spark-submit", "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--name", "stormpy-test-connect", "--master", self.master,
                "--conf", f"spark.connect.grpc.binding.port={self.port}",
                "--conf", f"spark.connect.grpc.binding.address={HOST}"]
        for key, value in self.conf.items():
            argv += ["--conf", f"{key}={value}"]
        proc = self._launch("connect", [*argv, "spark-internal"])
        self._wait("connect", proc, lambda: port_open(HOST, self.port), f"Spark Connect on {self.remote}", timeout)
        log.info("Spark Connect server ready: %s (driver on %s)", self.remote, self.master)
        return self


def run_connect_child(remote: str, master: str, argv: Sequence[str], timeout: float = 3600) -> str:
    """Run ``argv`` (a benchmark's child mode) with ``remote`` appended; ``remote`` ``start`` first
    starts a Connect server from the wheel (its driver on ``master``) and stops it after.

    Benchmarks measure Spark Connect in a child process because a process has one SparkSession
    and theirs is a classic one. Returns the child's stdout (its stderr's tail when it printed nothing).
    """
    import shutil
    import tempfile

    server = None
    if remote == "start":
        server = SparkConnectServer(tempfile.mkdtemp(prefix="stormpy-bench-connect-"), master=master).start()
        remote = server.remote
    try:
        done = subprocess.run([*argv, "--connect-child", remote], text=True, capture_output=True, timeout=timeout)
        return done.stdout.strip() or done.stderr[-2000:]
    finally:
        if server is not None:
            server.stop("benchmark done")
            shutil.rmtree(server.base, ignore_errors=True)


@atexit.register
def _stop_leftovers() -> None:
    for daemons in list(_RUNNING):
        daemons.stop("interpreter exit")
