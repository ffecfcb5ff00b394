"""Hosts for multi-host tests: Linux network namespaces on a bridge, each with its own address.

``HostNetwork(n)`` builds, as root, one bridge in the root namespace (with an address, so the
test process can reach every host) and ``n`` namespaces, each joined to the bridge by a veth
pair and given its own private IPv4 address. ``host.daemon(...)`` starts a stormpy daemon
inside a namespace (``ip netns exec``); the caller puts the host's address in
``storm.local.hostname`` (``host.conf(...)`` does), so the daemon and its workers bind and
advertise that address, never 127.0.0.1.

Every name carries a unique prefix (``sp<hex>``), so parallel runs and leftovers of a crashed
run never collide. ``close()`` (also run by a ``weakref.finalize`` and at interpreter exit)
stops the daemons it started, kills any process still inside its namespaces (a worker forked by
a supervisor), deletes the namespaces, veths and the bridge. It is idempotent and tolerates a
half-built network, so a failure during ``create()`` cleans up too.

``skip_reason()`` says why the harness cannot run here (not root, no ``ip``) or None.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import random
import shutil
import signal
import subprocess
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from stormpy.testing.processes import DaemonProcess

log = logging.getLogger(__name__)

IP_TIMEOUT_SECS = 20.0


def skip_reason() -> str | None:
    """Why network-namespace tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"sp{uuid.uuid4().hex[:6]}probe"
    try:
        _ip("netns", "add", probe)
    except RuntimeError as exc:
        return f"cannot create a network namespace here: {exc}"
    _ip("netns", "del", probe, check=False)
    return None


def _ip(*args: str, check: bool = True) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_SECS)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip() or result.returncode}")
    return result.stdout


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.128.0.0/9 that no route of the root namespace uses."""
    routes = _ip("-4", "route", "show", "table", "all", check=False)
    used = [ipaddress.ip_network(word, strict=False) for line in routes.splitlines()
            for word in line.split()[:1] if "/" in word]
    for _ in range(100):
        net = ipaddress.ip_network(f"10.{random.randint(128, 254)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(other) for other in used):
            return net
    raise RuntimeError("no free private /24 for the test network")


class NetnsDaemon(DaemonProcess):
    """A DaemonProcess whose command runs inside a network namespace (``ip netns exec``, which
    execs: the pid is the daemon's own, so SIGTERM/SIGKILL reach it directly)."""

    def __init__(self, namespace: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.namespace = namespace

    def argv(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *super().argv()]


class Host:
    """One namespace: its name, address and the daemons started in it."""

    def __init__(self, network: "HostNetwork", index: int, namespace: str, veth_outside: str, veth_inside: str,
                 address: str) -> None:
        self.network = network
        self.index = index
        self.namespace = namespace
        self.veth_outside = veth_outside
        self.veth_inside = veth_inside
        self.address = address
        self.daemons: list[NetnsDaemon] = []

    def conf(self, base: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
        """``base`` with this host's address as ``storm.local.hostname`` (bind and advertise)."""
        return {**base, "storm.local.hostname": self.address, **extra}

    def daemon(self, command: str | Sequence[str], conf: Mapping[str, Any], log_dir: str | os.PathLike[str],
               name: str | None = None, **kwargs: Any) -> NetnsDaemon:
        """A stormpy daemon to run on this host (not started); stopped by the network's close()."""
        proc = NetnsDaemon(self.namespace, command, conf, log_dir, name=name, **kwargs)
        self.daemons.append(proc)
        return proc

    def run(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a command inside this host (for checks such as ``ss -ltn``)."""
        return subprocess.run(["ip", "netns", "exec", self.namespace, *argv], capture_output=True, text=True,
                              timeout=timeout)

    def set_link(self, up: bool) -> None:
        """Cut (down) or restore (up) this host's network link: its veth end on the bridge."""
        _ip("link", "set", self.veth_outside, "up" if up else "down")

    def __repr__(self) -> str:
        return f"Host({self.namespace}, {self.address})"


class HostNetwork:
    """N network namespaces on one bridge; use as a context manager (or call close())."""

    def __init__(self, count: int, prefix: str | None = None) -> None:
        if count < 1:
            raise ValueError("a host network needs at least one host")
        self.count = count
        self.prefix = prefix or f"sp{uuid.uuid4().hex[:5]}"
        self.bridge = f"{self.prefix}br"
        self.hosts: list[Host] = []
        self.subnet: ipaddress.IPv4Network | None = None
        self.bridge_address: str | None = None
        # What exists, for the finalizer (which must not hold a reference to self).
        self._made: dict[str, list[str]] = {"links": [], "namespaces": [], "daemons": []}
        self._daemons: list[NetnsDaemon] = []
        self._finalizer = weakref.finalize(self, _cleanup, self._made, self._daemons)

    def create(self) -> "HostNetwork":
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def _create(self) -> None:
        self.subnet = _free_subnet()
        addresses = list(self.subnet.hosts())
        self.bridge_address = str(addresses[-1])
        _ip("link", "add", "name", self.bridge, "type", "bridge")
        self._made["links"].append(self.bridge)
        _ip("addr", "add", f"{self.bridge_address}/{self.subnet.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(self.count):
            namespace, outside, inside = f"{self.prefix}h{i}", f"{self.prefix}v{i}", f"{self.prefix}p{i}"
            _ip("netns", "add", namespace)
            self._made["namespaces"].append(namespace)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self._made["links"].append(outside)
            _ip("link", "set", inside, "netns", namespace)
            address = str(addresses[i])
            _ip("-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", inside)
            _ip("-n", namespace, "link", "set", inside, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("link", "set", outside, "master", self.bridge)
            _ip("link", "set", outside, "up")
            self.hosts.append(Host(self, i, namespace, outside, inside, address))
        log.info("host network %s: bridge %s (%s), hosts %s", self.prefix, self.bridge, self.subnet,
                 ", ".join(f"{h.namespace}={h.address}" for h in self.hosts))

    def daemon(self, host: Host, command: str | Sequence[str], conf: Mapping[str, Any],
               log_dir: str | os.PathLike[str], name: str | None = None, **kwargs: Any) -> NetnsDaemon:
        """``host.daemon(...)``, tracked for cleanup."""
        proc = host.daemon(command, conf, log_dir, name=name, **kwargs)
        self._daemons.append(proc)
        return proc

    def close(self) -> None:
        """Stop every daemon, kill what is left in the namespaces, delete namespaces and links."""
        self._finalizer()

    def __enter__(self) -> "HostNetwork":
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()


def namespace_pids(namespace: str) -> list[int]:
    out = _ip("netns", "pids", namespace, check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def _cleanup(made: dict[str, list[str]], daemons: list[NetnsDaemon]) -> None:
    for proc in reversed(daemons):
        try:
            proc.stop(reason="host network cleanup", grace_secs=5)
        except Exception as exc:  # noqa: BLE001 - cleanup goes on whatever one daemon does
            log.warning("stopping %s: %s", proc.name, exc)
    for namespace in made["namespaces"]:
        # Workers forked by supervisors (and anything else) still inside: they are ours.
        deadline = time.monotonic() + 10
        while (pids := namespace_pids(namespace)) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        _ip("netns", "del", namespace, check=False)
    for link in reversed(made["links"]):
        _ip("link", "del", link, check=False)   # deleting a veth end deletes its peer too
    made["namespaces"].clear()
    made["links"].clear()
    daemons.clear()


def leftovers(prefix: str) -> list[str]:
    """Namespaces and links whose names start with ``prefix`` (for tests of the cleanup)."""
    names = [line.split()[0] for line in _ip("netns", "list", check=False).splitlines() if line.strip()]
    links = [line.split(":")[1].strip().split("@")[0] for line in _ip("-o", "link", check=False).splitlines()
             if line.count(":") >= 2]
    return [n for n in names + links if n.startswith(prefix)]

