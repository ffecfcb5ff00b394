"""The supervisor's log viewer: worker logs over HTTP, and their retention.

Storm runs a separate ``logviewer`` daemon per host; stormpy runs it as a thread of the
supervisor (it serves that supervisor's ``<storm.log.dir>/workers-artifacts`` only, which is
what ``stormpy logs`` and the UI need). The supervisor publishes the port it listens on in its
SupervisorInfo (``logviewer_port``), so clients find it through Nimbus's cluster summary even
when several supervisors share a host.

API (text, never HTML, so a log line can never become markup):

- ``GET /api/v1/log?file=<topology-id>/<port>/worker.log[&start=BYTE][&length=BYTES]``: the
  bytes ``[start, start+length)`` of the file, or its last ``length`` bytes when ``start`` is
  absent (a tail). Headers ``X-Log-Start`` (offset of the first byte sent) and ``X-Log-Size``
  (the file's size) let a follower ask for what came next and notice a rotation (size shrank).
- ``GET /api/v1/files``: JSON list of every readable log file (relative paths).

Login (:class:`LogAccess`): when the UI's login is on (``ui.auth.enable``, or Thrift
authentication), every request needs an HTTP basic login from the same ``ui.users.file``,
checked by the same code (``stormpy.auth.HttpLogins``), or, from ``stormpy logs``, a request
signed with a key derived from the shared secret (``stormpy.auth.sign_log_request``).

Only regular files under ``workers-artifacts`` can be read: names are resolved (symlinks
included) and must stay inside it; anything else is 404, a malformed request 400.

:class:`LogCleaner` deletes the directories of topologies that are no longer assigned once their
newest file is older than ``logviewer.cleanup.age.mins`` (Storm's key); rotation itself is done
by the worker (``worker.log.max.bytes``).

Threads: ``ThreadingHTTPServer`` serves each request on a daemon thread (handlers only read
files); the cleaner runs on the supervisor's own "supervisor-logcleaner" thread.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import stormpy
from stormpy import auth
from stormpy.tls import TLSServerMixin

log = logging.getLogger(__name__)

DEFAULT_TAIL_BYTES = 51200          # Storm's logviewer default page length
MAX_READ_BYTES = 1024 * 1024
TEXT_TYPE = "text/plain; charset=utf-8"


class LogError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LogAccess:
    """Who may read logs: everyone (``required`` False), else a ``logins`` user, a request
    signed with ``secret``, or a client certificate from the cluster's CA. With ``policy``
    (Nimbus's principals, ``authz.Policy``) a user or certificate reads only the logs of
    topologies it may operate (``acl_of(topology_id)``), as ``getTopologyConf``; the file list
    only admins and daemons."""

    required: bool = False
    logins: auth.HttpLogins | None = None
    secret: bytes | None = None
    policy: Any = None
    acl_of: Callable[[str], Any] | None = None

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], acl_of: Callable[[str], Any] | None = None) -> "LogAccess":
        """The UI's rule (``auth.http_login_required``); a UserError when login is on but nobody
        could ever log in (no ``ui.users.file``, no shared secret, no client certificates)."""
        from stormpy import tls
        from stormpy.nimbus.authz import Policy

        certs = tls.enabled(conf, "logviewer") and tls.client_auth(conf, "logviewer") != "none"
        policy = Policy(conf, enforce=True) if tls.client_auth_required(conf, "nimbus.thrift") else None
        if not auth.http_login_required(conf) and policy is None:
            return cls()
        access = cls(True, auth.HttpLogins.from_conf(conf, "log viewer", required=False), auth.read_secret(conf),
                     policy, acl_of)
        if access.logins is None and access.secret is None and not certs:
            auth.HttpLogins.from_conf(conf, "log viewer")     # raises the UI's one-line error
        return access

    def allows(self, target: str, headers: Mapping[str, str], principal: str | None = None) -> bool:
        if not self.required:
            return True
        signature = headers.get(auth.LOG_SIGNATURE_HEADER)
        if self.secret is not None and signature and auth.check_log_signature(self.secret, target, signature):
            return True
        user = self.logins.user(headers.get("Authorization")) if self.logins is not None else None
        who = user or principal
        if who is None:
            return False
        return self.policy is None or self._topology_allowed(target, who)

    def _topology_allowed(self, target: str, who: str) -> bool:
        from stormpy.nimbus.authz import Caller

        caller = Caller(who)
        if self.policy.may_read_all(caller):
            return True
        url = urlsplit(target)
        file = (parse_qs(url.query).get("file") or [""])[-1]
        topology_id = file.strip("/").split("/")[0]
        acl = self.acl_of(topology_id) if self.acl_of is not None and topology_id else None
        allowed = acl is not None and self.policy.may_operate(caller, acl)
        if not allowed:
            log.warning("log viewer: refused %s to %r: not the owner of the topology, not in topology.users, "
                        "not an admin", url.path, who)
        return allowed


def artifacts_root(log_dir: str | os.PathLike[str]) -> Path:
    return Path(log_dir) / "workers-artifacts"


def resolve_log_file(root: Path, name: str) -> Path:
    """``root/name`` if that is a regular file inside ``root`` (after resolving links), else LogError."""
    if not name or "\x00" in name or name.startswith("/"):
        raise LogError(400, "file must be a relative path like <topology-id>/<port>/worker.log")
    base = root.resolve()
    target = (base / name).resolve()
    if not target.is_relative_to(base) or target == base:
        raise LogError(404, f"no such log file: {name}")
    if not target.is_file():
        raise LogError(404, f"no such log file: {name}")
    return target


def read_range(path: Path, start: int | None, length: int) -> tuple[int, int, bytes]:
    """(offset of first byte, file size, data) for ``length`` bytes from ``start`` (None: tail)."""
    length = max(0, min(int(length), MAX_READ_BYTES))
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        offset = max(0, size - length) if start is None else min(max(0, int(start)), size)
        f.seek(offset)
        return offset, size, f.read(length)


def list_logs(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.is_symlink())


class _Handler(BaseHTTPRequestHandler):
    server: "LogViewerServer"
    server_version = f"stormpy-logviewer/{stormpy.__version__}"

    def _principal(self) -> str | None:
        """The CN of a client certificate the TLS handshake verified (logviewer.tls.client.auth)."""
        if isinstance(self.connection, ssl.SSLSocket):
            from stormpy.tls import peer_principal

            return peer_principal(self.connection)[0]
        return None

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            if not self.server.access.allows(self.path, self.headers, self._principal()):
                log.warning("log viewer: refused a request from %s without a valid login", self.client_address[0])
                self._send(401, TEXT_TYPE, b"this needs a login (ui.users.file), like the UI\n",
                           {"WWW-Authenticate": 'Basic realm="stormpy", charset="UTF-8"'})
                return
            if url.path.rstrip("/") == "/api/v1/log":
                self._send_log(query)
            elif url.path.rstrip("/") == "/api/v1/files":
                body = json.dumps({"files": list_logs(self.server.root)}).encode()
                self._send(200, "application/json", body)
            else:
                raise LogError(404, f"no such endpoint: {url.path} (use /api/v1/log?file=...)")
        except LogError as exc:
            self._send(exc.status, TEXT_TYPE, f"{exc}\n".encode())
        except Exception as exc:  # noqa: BLE001 - answer, and keep the trace in the supervisor log
            log.exception("log viewer: GET %s failed", url.path)
            self._send(500, TEXT_TYPE, f"{type(exc).__name__}: {exc}\n".encode())

    def _send_log(self, query: dict[str, str]) -> None:
        path = resolve_log_file(self.server.root, query.get("file", ""))
        try:
            start = int(query["start"]) if query.get("start") not in (None, "") else None
            length = int(query.get("length") or DEFAULT_TAIL_BYTES)
        except ValueError:
            raise LogError(400, "start and length must be integers") from None
        offset, size, data = read_range(path, start, length)
        self._send(200, TEXT_TYPE, data, {"X-Log-Start": str(offset), "X-Log-Size": str(size)})

    def _send(self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("log viewer %s %s", self.address_string(), format % args)


class LogViewerServer(TLSServerMixin, ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], root: Path, access: LogAccess | None = None) -> None:
        self.root = root
        self.access = access or LogAccess()
        super().__init__(address, _Handler)


class LogViewer:
    """The HTTP server on its own thread; ``port`` is the bound port (useful when configured 0)."""

    def __init__(self, log_dir: str | os.PathLike[str], port: int, host: str = "0.0.0.0",
                 access: LogAccess | None = None, tls_context: Any = None) -> None:
        self.root = artifacts_root(log_dir)
        self.server = LogViewerServer((host, port), self.root, access)      # binds now: errors surface here
        self.server.tls_context = tls_context     # logviewer.tls.enable: HTTPS only
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="supervisor-logviewer", daemon=True)

    def start(self) -> "LogViewer":
        self._thread.start()
        log.info("log viewer serving %s on port %d", self.root, self.port)
        return self

    def stop(self, reason: str = "supervisor stopping") -> None:
        log.info("log viewer stopping: %s", reason)
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


class LogCleaner:
    """Deletes ``workers-artifacts/<topology-id>`` dirs of topologies gone for ``age_secs``.

    ``live_topologies()`` returns the ids still assigned anywhere (from ZooKeeper); it may raise,
    in which case nothing is deleted this round.
    """

    def __init__(self, log_dir: str | os.PathLike[str], age_secs: float,
                 live_topologies: Callable[[], Iterable[str]], clock: Callable[[], float] = time.time) -> None:
        self.root = artifacts_root(log_dir)
        self.age_secs = age_secs
        self._live = live_topologies
        self._clock = clock

    def clean_once(self) -> list[str]:
        """One pass; returns the topology ids whose logs were deleted."""
        if not self.root.is_dir():
            return []
        live = set(self._live())
        now = self._clock()
        removed = []
        for entry in sorted(self.root.iterdir()):
            if not entry.is_dir() or entry.is_symlink() or entry.name in live:
                continue
            newest = max((p.stat().st_mtime for p in entry.rglob("*") if p.is_file()), default=entry.stat().st_mtime)
            if now - newest >= self.age_secs:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
                log.info("deleted worker logs of %s (topology gone, logs %.0f min old)", entry.name,
                         (now - newest) / 60)
        return removed

    def run(self, stop: threading.Event, interval_secs: float) -> None:
        """The cleaner thread's loop: a pass every ``interval_secs`` until ``stop`` is set."""
        while not stop.wait(interval_secs):
            try:
                self.clean_once()
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away or a file vanished: next round
                log.warning("worker log cleanup skipped: %s", exc)
