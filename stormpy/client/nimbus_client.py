"""Connecting to Nimbus: a thriftpy2 client over framed binary transport, as Storm clients speak.

``connect(conf)`` tries each host of ``nimbus.seeds`` (or the old ``nimbus.host``) on
``nimbus.thrift.port``, asks it who leads (``getLeader``) and yields a ``storm.Nimbus`` client
connected to the leader (several Nimbus daemons: DESIGN section 14); when none answers, or none
knows a leader, it raises a one-line ``UserError`` so every CLI command fails clearly. When some
Nimbus answers but none leads yet (a failover; a restarted Nimbus whose predecessor's ZooKeeper
session has not expired), it first waits up to ``nimbus.leader.wait.secs``, saying so in one
line on stderr; daemons pass ``leader_wait_secs=0``. Used by the CLI, the supervisor (code
downloads) and the UI, each from its own thread: a client is a single TCP connection and must
not be shared between threads. With
``nimbus.thrift.tls.enable`` every connection is TLS (``open_client``, ``client_tls``).
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.thrift import TApplicationException, TClient
from thriftpy2.transport import TFramedTransportFactory, TSocket, TTransportException

from stormpy.auth import AuthError, client_handshake, read_secret
from stormpy.config import NIMBUS_HOST, NIMBUS_LEADER_WAIT_SECS, NIMBUS_SEEDS, NIMBUS_THRIFT_PORT, read
from stormpy.errors import UserError
from stormpy.thrift import storm
from stormpy.tls import describe_error

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECS = 60.0
#: How long a TCP connect to one Nimbus may take, apart from the calls' timeout: a seed whose
#: host is off the network (SYNs dropped) must not hold a client, or a supervisor's code sync,
#: for the whole call timeout before the next seed is tried. A reachable host answers a connect
#: in milliseconds, whatever the calls then take.
CONNECT_TIMEOUT_SECS = 5.0


def nimbus_addresses(conf: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(host, port) candidates from ``nimbus.seeds`` (or ``nimbus.host``) and ``nimbus.thrift.port``."""
    port = int(read(conf, NIMBUS_THRIFT_PORT))
    seeds = conf.get(NIMBUS_SEEDS.name)
    if conf.get(NIMBUS_HOST.name) and (not seeds or list(seeds) == NIMBUS_SEEDS.default):
        seeds = [conf.get(NIMBUS_HOST.name)]   # an old storm.yaml that only sets nimbus.host
    if isinstance(seeds, str):
        seeds = [seeds]
    addresses = []
    for seed in seeds or read(None, NIMBUS_SEEDS):   # empty: the declared seeds
        host, sep, maybe_port = str(seed).rpartition(":")
        if sep and maybe_port.isdigit() and host:
            addresses.append((host, int(maybe_port)))
        else:
            addresses.append((str(seed), port))
    return addresses


def open_client(host: str, port: int, timeout_secs: float = DEFAULT_TIMEOUT_SECS,
                secret: bytes | None = None, tls: ssl.SSLContext | None = None) -> Any:
    """A connected ``storm.Nimbus`` client to host:port (framed binary); raises TTransportException.

    The one place a Thrift transport to Nimbus is built. With ``tls``
    (``stormpy.tls.client_context(conf)``, when ``nimbus.thrift.tls.enable``) the socket is
    wrapped in TLS first (server certificate and host name checked; an ``ssl.SSLError`` when
    the handshake fails). With ``secret`` (``stormpy.auth.read_secret(conf)``) the
    shared-secret handshake then runs on it; AuthError when it fails. The framed transport is
    layered on the result.
    """
    try:
        raw = socket.create_connection((host, port), timeout=min(timeout_secs, CONNECT_TIMEOUT_SECS))
    except OSError as exc:   # as thriftpy2's own sockets say it: callers catch TTransportException
        raise TTransportException(TTransportException.NOT_OPEN,
                                  f"Could not connect to {host}:{port} ({describe_error(exc) or type(exc).__name__})") from exc
    raw.settimeout(timeout_secs)
    try:
        conn = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        if secret is not None:
            client_handshake(conn, secret)
    except BaseException:
        raw.close()
        raise
    sock = TSocket(sock=conn, socket_timeout=int(timeout_secs * 1000))
    transport = TFramedTransportFactory().get_transport(sock)   # the socket is open: no open() again
    return TClient(storm.Nimbus, TBinaryProtocolFactory().get_protocol(transport))


def client_tls(conf: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The TLS context of a Nimbus client when ``nimbus.thrift.tls.enable``, else None."""
    from stormpy import tls

    return tls.client_context(conf) if tls.enabled(conf, "nimbus.thrift") else None


def open_peer(conf: Mapping[str, Any], host: str, port: int, timeout_secs: float = DEFAULT_TIMEOUT_SECS) -> Any:
    """A client of the Nimbus at host:port itself (no leader search), secured as ``conf`` says:
    a supervisor offering code to a Nimbus that asked for it. The caller closes it."""
    return open_client(host, port, timeout_secs, read_secret(conf), client_tls(conf))


def upload_file(client: Any, path: str | os.PathLike[str], chunk_bytes: int = 1024 * 1024) -> str:
    """Upload one file with beginFileUpload/uploadChunk/finishFileUpload; returns its location."""
    location = client.beginFileUpload()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_bytes), b""):
            client.uploadChunk(location, chunk)
    client.finishFileUpload(location)
    return location


@contextlib.contextmanager
def connect(conf: Mapping[str, Any], timeout_secs: float = DEFAULT_TIMEOUT_SECS,
            leader_wait_secs: float | None = None) -> Iterator[Any]:
    """Yield a Nimbus client for the first reachable seed; close it afterwards.

    Connection failures become ``UserError`` naming every address tried. A connection that
    breaks in the middle of a call (Nimbus died) also becomes a ``UserError``; Thrift
    exceptions declared by the IDL (NotAliveException, ...) propagate unchanged.
    ``leader_wait_secs`` (default ``nimbus.leader.wait.secs``): how long to wait for a leader.
    """
    client = find_leader(conf, timeout_secs, leader_wait_secs)
    try:
        yield client
    except (TTransportException, socket.timeout, ConnectionError, ssl.SSLError) as exc:
        raise UserError(f"lost the connection to Nimbus: {_reason(exc)}") from None
    finally:
        with contextlib.suppress(Exception):
            client.close()


def find_leader(conf: Mapping[str, Any], timeout_secs: float = DEFAULT_TIMEOUT_SECS,
                leader_wait_secs: float | None = None) -> Any:
    """A client connected to the leader Nimbus, found by asking the seeds in order (Storm's
    ``NimbusClient.getConfiguredClient``): a seed names the leader (``getLeader``) and, when the
    leader is another Nimbus, the client connects there. When seeds answer but none knows a
    reachable leader, ask again for up to ``leader_wait_secs`` (default
    ``nimbus.leader.wait.secs``), printing one line that it waits. ``UserError`` when no seed
    answers, or still no leader then (Storm's NimbusLeaderNotFoundException)."""
    if leader_wait_secs is None:
        leader_wait_secs = float(read(conf, NIMBUS_LEADER_WAIT_SECS))
    deadline = time.monotonic() + max(0.0, leader_wait_secs)
    told = False
    while True:
        try:
            return _find_leader_once(conf, timeout_secs)
        except _NoLeaderYet as exc:
            if time.monotonic() >= deadline:
                raise UserError(str(exc)) from None
            if not told:
                told = True
                sys.stderr.write(f"Waiting up to {leader_wait_secs:g}s for a leader Nimbus "
                                 f"(nimbus.leader.wait.secs): {exc.short}\n")
                sys.stderr.flush()
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


class _NoLeaderYet(Exception):
    """Nimbus daemons answer but none leads (yet)."""

    def __init__(self, message: str, short: str) -> None:
        super().__init__(message)
        self.short = short


def _find_leader_once(conf: Mapping[str, Any], timeout_secs: float) -> Any:
    addresses = nimbus_addresses(conf)
    secret = read_secret(conf)
    tls = client_tls(conf)
    reasons: list[str] = []
    reached = tls_failed = answered = False   # answered: some Nimbus said who leads (or that none does)
    for host, port in addresses:
        try:
            client = open_client(host, port, timeout_secs, secret, tls)
        except ssl.SSLError as exc:
            reasons.append(f"{host}:{port} (TLS failed: {describe_error(exc)})")
            log.debug("TLS to Nimbus at %s:%d failed: %s", host, port, exc)
            tls_failed = True
            continue
        except AuthError as exc:
            reasons.append(f"{host}:{port} (authentication failed: {exc}; is storm.thrift.auth.secret.file "
                           "the same on Nimbus?)")
            log.debug("Nimbus at %s:%d refused authentication: %s", host, port, exc)
            continue
        except (TTransportException, OSError) as exc:
            reasons.append(f"{host}:{port} ({_reason(exc)})")
            log.debug("Nimbus not reachable at %s:%d: %s", host, port, exc)
            continue
        reached = True
        try:
            leader = client.getLeader()
        except (TTransportException, TApplicationException, OSError) as exc:
            reasons.append(f"{host}:{port} (getLeader failed: {_reason(exc)})")
            _close(client)
            continue
        answered = True
        if leader is None or not leader.isLeader:
            reasons.append(f"{host}:{port} (knows no leader)")
            _close(client)
            continue
        if (leader.host, int(leader.port)) == (host, port):
            return client
        _close(client)
        try:
            return open_client(leader.host, int(leader.port), timeout_secs, secret, tls)
        except ssl.SSLError as exc:
            reasons.append(f"{host}:{port} (its leader {leader.host}:{leader.port}: TLS failed: {describe_error(exc)})")
        except (AuthError, TTransportException, OSError) as exc:
            reasons.append(f"{host}:{port} (its leader {leader.host}:{leader.port}: {_reason(exc)})")
    if not reached and tls_failed:
        raise UserError(f"TLS to Nimbus failed at {', '.join(reasons)}")
    if not reached:
        raise UserError(f"cannot reach Nimbus at {', '.join(reasons)}; is `stormpy nimbus` running? "
                        f"(check nimbus.seeds and nimbus.thrift.port)")
    if not answered:   # reached, but no Nimbus could tell (TLS refused after the handshake, a broken call)
        raise UserError(f"could not find a leader Nimbus from the seed hosts: {', '.join(reasons)}")
    raise _NoLeaderYet(f"could not find a leader Nimbus from the seed hosts: {', '.join(reasons)} "
                       f"(a failover takes up to storm.zookeeper.session.timeout; check nimbus.seeds)",
                       ", ".join(reasons))


def _close(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed: {describe_error(exc)}"
    text = str(getattr(exc, "message", "") or exc)
    if "Connection refused" in text or isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if "Could not connect" in text:
        return "could not connect"
    if "timed out" in text:
        return "timed out"
    return text or type(exc).__name__
