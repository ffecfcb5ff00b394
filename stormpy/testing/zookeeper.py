"""A real ZooKeeper server, from a ZooKeeper distribution or the jars inside the pyspark wheel.

PySpark ships ``zookeeper-*.jar`` and ``zookeeper-jute-*.jar`` (plus the slf4j/log4j2 and
netty jars they need), and it needs Java 17 anyway, so a standalone server is one ``java``
command away: ``java -cp '<pyspark>/jars/*' org.apache.zookeeper.server.ZooKeeperServerMain
zoo.cfg``. Without the ``spark`` extra, a ZooKeeper distribution's ``lib/`` serves the same
(``zookeeper_home``, ``$ZOOKEEPER_HOME``). ``stormpy dev-zookeeper`` and the test fixtures both
use this class.

Logging is kept quiet (WARN, to ``zookeeper.log`` in the data directory) because a dev server
talking at INFO drowns the daemons' own logs. The AdminServer (Jetty on port 8080) is
disabled: it would collide with the UI and with parallel test servers.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any

from stormpy.testing.processes import free_port, log_tail, stop_process

log = logging.getLogger(__name__)

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %-5p [%t] %c{{1}}: %m%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""

_LOGBACK = """\
<configuration>
  <appender name="file" class="ch.qos.logback.core.FileAppender">
    <file>{log_file}</file>
    <encoder><pattern>%d{{ISO8601}} %-5p [%t] %c{{1}}: %m%n</pattern></encoder>
  </appender>
  <root level="{level}"><appender-ref ref="file"/></root>
</configuration>
"""


class ZooKeeperUnavailable(RuntimeError):
    """Java or the ZooKeeper jars are missing; the message says which and what to install."""


NO_JARS_HINT = ("ZooKeeper's jars come from the pyspark wheel (pip install 'stormpy-streams[spark]') or from a "
                "ZooKeeper distribution you point at: --zookeeper-home DIR, dev.zookeeper.home or $ZOOKEEPER_HOME "
                "(https://zookeeper.apache.org/releases.html, the -bin tarball)")


def pyspark_jars_dir() -> Path:
    """The ``jars`` directory of the installed pyspark wheel (holds the ZooKeeper server jars)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        raise ZooKeeperUnavailable(f"pyspark is not installed; {NO_JARS_HINT}")
    jars = Path(spec.origin).resolve().parent / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise ZooKeeperUnavailable(f"no zookeeper-*.jar in {jars}; reinstall pyspark")
    return jars


def zookeeper_jar_dirs(home: str | os.PathLike[str] | None = None) -> list[Path]:
    """Directories whose jars make ZooKeeper's classpath.

    ``home`` (else ``$ZOOKEEPER_HOME``) is a ZooKeeper distribution: its jars are in ``lib/``
    (the ``-bin`` tarball) or at its top. Without one, the pyspark wheel's ``jars/``.
    """
    home = home or os.environ.get("ZOOKEEPER_HOME") or None
    if home is None:
        return [pyspark_jars_dir()]
    root = Path(home).expanduser().resolve()
    dirs = [d for d in (root / "lib", root) if any(d.glob("zookeeper-*.jar"))]
    if not dirs:
        raise ZooKeeperUnavailable(f"no zookeeper-*.jar in {root} or {root / 'lib'}: the ZooKeeper home must be an "
                                   "unpacked apache-zookeeper-*-bin distribution")
    return dirs


def java_executable() -> str:
    """The ``java`` to run: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ZooKeeperUnavailable("Java is not installed or not on PATH; ZooKeeper (and PySpark) "
                                   "need Java 17: install a JDK 17 and set JAVA_HOME")
    return found


def four_letter_word(host: str, port: int, word: str = "ruok", timeout: float = 1.0,
                     tls: ssl.SSLContext | None = None) -> str:
    """Send a ZooKeeper four-letter command and return the reply ('' when unreachable); over
    TLS with ``tls`` (a TLS-only server, ``storm.zookeeper.ssl.enable``)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                (tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw) as sock:
            sock.sendall(word.encode())
            chunks = []
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One standalone ZooKeeper server process.

    ``start()`` writes ``zoo.cfg`` and a log4j2 config into ``data_dir``, starts Java and waits
    until the server answers ``ruok``; ``stop()`` sends SIGTERM and escalates to SIGKILL.
    ``hosts`` is the kazoo connection string. Called from one thread (the test or the CLI).
    """

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None, *, host: str = "127.0.0.1",
                 tick_time_ms: int = 2000, log_level: str = "WARN", heap_mb: int = 256,
                 tls: tuple[str, str, str] | None = None,
                 zookeeper_home: str | os.PathLike[str] | None = None) -> None:
        """``tls``: (certfile, keyfile, cafile) PEMs: serve only TLS on ``port`` (ZooKeeper's
        secureClientPort, Netty), clients need a certificate from the CA; no plaintext port.
        ``zookeeper_home``: a ZooKeeper distribution whose jars to run (default: the pyspark wheel's)."""
        self.tls = tls
        self.zookeeper_home = zookeeper_home
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port(host)
        self.host = host
        self.tick_time_ms = tick_time_ms
        self.log_level = log_level
        self.heap_mb = heap_mb
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def output_path(self) -> Path:
        return self.data_dir / "zookeeper.out"

    def _write_config(self) -> Path:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        # 0700: the snapshots hold every node, whatever its ACL (a worker running as another
        # user must not read another topology's state from the disk)
        (self.data_dir / "data").chmod(0o700)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text("\n".join([
            f"tickTime={self.tick_time_ms}",
            f"dataDir={self.data_dir / 'data'}",
            *self._port_lines(),
            f"{'secureC' if self.tls else 'c'}lientPortAddress={self.host}" if self.host not in ("0.0.0.0", "") else "",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            "autopurge.purgeInterval=1",
            "autopurge.snapRetainCount=3",
            "",
        ]))
        (self.data_dir / "log4j2.properties").write_text(
            _LOG4J2.format(log_file=self.log_path, level=self.log_level))
        (self.data_dir / "logback.xml").write_text(
            _LOGBACK.format(log_file=self.log_path, level=self.log_level))
        return cfg

    def _port_lines(self) -> list[str]:
        if self.tls is None:
            return [f"clientPort={self.port}"]
        certfile, keyfile, cafile = self.tls
        keystore = self.data_dir / "keystore.pem"      # ZooKeeper's PEM keystore: key then certificate
        fd = os.open(keystore, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(Path(keyfile).read_bytes() + b"\n" + Path(certfile).read_bytes())
        return [f"secureClientPort={self.port}",
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"ssl.keyStore.location={keystore}", "ssl.keyStore.type=PEM",
                f"ssl.trustStore.location={cafile}", "ssl.trustStore.type=PEM",
                "ssl.clientAuth=need", "ssl.protocol=TLSv1.3", "ssl.enabledProtocols=TLSv1.3,TLSv1.2"]

    def probe_context(self) -> ssl.SSLContext | None:
        """A client TLS context for the readiness probe (None for a plaintext server)."""
        if self.tls is None:
            return None
        certfile, keyfile, cafile = self.tls
        ctx = ssl.create_default_context(cafile=cafile)
        ctx.check_hostname = False       # the probe dials host, which may be 0.0.0.0
        ctx.load_cert_chain(certfile, keyfile)
        return ctx

    def command(self) -> list[str]:
        """The java command line (classpath = the ZooKeeper home's jars, else the pyspark wheel's)."""
        classpath = os.pathsep.join(f"{d}{os.sep}*" for d in zookeeper_jar_dirs(self.zookeeper_home))
        return [
            java_executable(), f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            # a distribution logs through logback (3.8+): the same quiet file, no console chatter
            f"-Dlogback.configurationFile={self.data_dir / 'logback.xml'}",
            "-cp", classpath, MAIN_CLASS, str(self.data_dir / "zoo.cfg"),
        ]

    def start(self, timeout: float = 60.0) -> "ZooKeeperServer":
        """Start the server and wait until it answers ``ruok`` (or raise with its output)."""
        if self.is_alive():
            return self
        cfg_cmd = self.command()  # raises ZooKeeperUnavailable before anything is written
        self._write_config()
        out = open(self.output_path, "ab")
        try:
            self.proc = subprocess.Popen(cfg_cmd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            out.close()
        log.info("starting ZooKeeper on %s (pid %d, data in %s)", self.hosts, self.proc.pid, self.data_dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited with code {self.proc.returncode} on start:\n{self.tail()}")
            if four_letter_word(self.host, self.port, "ruok", tls=self.probe_context()) == "imok":
                return self
            time.sleep(0.2)
        self.stop(reason="did not become ready")
        raise ZooKeeperUnavailable(f"ZooKeeper on {self.hosts} did not answer within {timeout:g}s:\n{self.tail()}")

    def wait(self) -> int:
        """Block until the server process exits; returns its exit code."""
        if self.proc is None:
            return 0
        return self.proc.wait()

    def stop(self, reason: str = "stop requested", grace_secs: float = 10.0) -> int | None:
        """SIGTERM, bounded wait, SIGKILL, reap."""
        if self.proc is None:
            return None
        return stop_process(self.proc, f"ZooKeeper {self.hosts}", reason, grace_secs)

    def kill(self) -> None:
        """Fault hook: SIGKILL the server (tests restart it with ``start()`` on the same port)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        """The end of the server's stdout and log file, for error messages."""
        return f"{log_tail(self.output_path, lines)}\n{log_tail(self.log_path, lines)}"

    def client_conf(self, root: str = "/storm") -> dict[str, Any]:
        """Config keys that point stormpy at this server with the given chroot."""
        return {"storm.zookeeper.servers": [self.host], "storm.zookeeper.port": self.port,
                "storm.zookeeper.root": root}

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(reason="context exit")
