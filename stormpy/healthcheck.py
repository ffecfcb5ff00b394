"""``python -m stormpy.healthcheck [DAEMON] [--config FILE]``: is this host's daemon serving?

The container image's ``HEALTHCHECK`` (and a Kubernetes probe) runs it. Without ``DAEMON`` it
finds the one stormpy daemon running here (``stormpy nimbus|supervisor|ui|dev-zookeeper``) and
reads the config file named on that daemon's command line, so one image-wide health check
suits every service. It then asks the daemon's own port:

- ``nimbus``: a TCP connection to ``nimbus.thrift.port`` is accepted;
- ``ui``: the same on ``ui.port``;
- ``dev-zookeeper``: ZooKeeper's ``ruok`` on ``storm.zookeeper.port`` answers ``imok`` (a
  TLS-only server, ``storm.zookeeper.ssl.enable``: the connection is accepted);
- ``supervisor``: the process is alive, and its log viewer accepts a connection when
  ``logviewer.port`` is set (a supervisor without one has no port to ask).

A connection, not a request: it holds whether or not the port speaks TLS, and needs no
credentials when the UI or Nimbus asks for them.

Exit 0 when healthy; otherwise 1 with one line saying what did not answer.
Threads: a short-lived CLI process, main thread only.
"""
from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

from stormpy import config as C
from stormpy.config import ConfigError, load_config

DAEMONS = ("nimbus", "supervisor", "ui", "dev-zookeeper")
TIMEOUT_SECS = 5.0


class Unhealthy(Exception):
    """The daemon did not answer; ``str()`` is the one line printed."""


def daemon_of(cmdline: Sequence[str]) -> tuple[str, str | None] | None:
    """(daemon, config file) when ``cmdline`` runs a stormpy daemon, else None."""
    words = [w.rsplit("/", 1)[-1] for w in cmdline]
    if not any(w in ("stormpy", "stormpy.cli") for w in words):
        return None
    daemon = next((w for w in cmdline if w in DAEMONS), None)
    if daemon is None:
        return None
    args = list(cmdline)
    config = args[args.index("--config") + 1] if "--config" in args[:-1] else None
    return daemon, config


def find_daemon() -> tuple[str, str | None]:
    """(daemon, config file) of the stormpy daemon running on this host (container)."""
    for proc in psutil.process_iter(["cmdline"]):
        found = daemon_of(proc.info.get("cmdline") or [])
        if found is not None:
            return found
    raise Unhealthy("no stormpy daemon (nimbus, supervisor, ui, dev-zookeeper) is running here")


def _connect(host: str, port: int, what: str) -> socket.socket:
    try:
        return socket.create_connection((host, port), timeout=TIMEOUT_SECS)
    except OSError as exc:
        raise Unhealthy(f"{what} does not answer on {host}:{port}: {exc.strerror or exc}") from None


def check(daemon: str, conf: Mapping[str, Any], host: str = "127.0.0.1") -> str:
    """Raise Unhealthy unless ``daemon`` answers; returns what was checked."""
    if daemon == "nimbus":
        port = int(conf[C.NIMBUS_THRIFT_PORT.name])
        _connect(host, port, "Nimbus").close()
        return f"Nimbus accepts connections on port {port}"
    if daemon == "ui":
        port = int(conf[C.UI_PORT.name])
        _connect(host, port, "UI").close()
        return f"UI accepts connections on port {port}"
    if daemon == "dev-zookeeper":
        port = int(conf[C.STORM_ZOOKEEPER_PORT.name])
        if conf.get(C.STORM_ZOOKEEPER_SSL_ENABLE.name):      # no plaintext four-letter words on a TLS port
            _connect(host, port, "ZooKeeper").close()
            return f"ZooKeeper accepts connections on port {port}"
        with _connect(host, port, "ZooKeeper") as sock:
            sock.sendall(b"ruok")
            answer = sock.recv(16)
        if answer != b"imok":
            raise Unhealthy(f"ZooKeeper on port {port} answered {answer!r} to ruok")
        return f"ZooKeeper answers imok on port {port}"
    if daemon == "supervisor":
        port = conf.get(C.LOGVIEWER_PORT.name)
        if port:
            _connect(host, int(port), "the supervisor's log viewer").close()
            return f"supervisor's log viewer accepts connections on port {port}"
        return "supervisor is running"
    raise Unhealthy(f"unknown daemon {daemon!r}; one of {', '.join(DAEMONS)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stormpy.healthcheck", description=__doc__.split("\n")[0])
    parser.add_argument("daemon", nargs="?", choices=DAEMONS, help="default: the stormpy daemon running here")
    parser.add_argument("--config", default=None, help="its storm.yaml (default: the daemon's --config)")
    args = parser.parse_args(argv)
    try:
        daemon, config = (args.daemon, args.config) if args.daemon else find_daemon()
        conf = load_config(args.config or config, {})
        print(check(daemon, conf))
        return 0
    except (Unhealthy, ConfigError) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
