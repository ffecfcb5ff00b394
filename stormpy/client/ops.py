"""``stormpy errors`` and ``stormpy logs``: a topology's errors and worker logs, through the cluster.

Errors come from Nimbus (``getTopologyInfo().errors``: the newest ``topology.error.retain`` per
component, with time, host and port, as Storm's ``get-errors``). Logs are never read over ssh:
Nimbus says which host:port runs each executor, its cluster summary says which supervisors run on
that host and on which ``logviewer_port`` they serve, and the supervisor's log viewer
(:mod:`stormpy.supervisor.logviewer`) returns the bytes of
``workers-artifacts/<topology-id>/<port>/worker.log``. Runs on the CLI's main thread.
"""
from __future__ import annotations

import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import click

from stormpy.auth import LOG_SIGNATURE_HEADER, read_secret, sign_log_request
from stormpy.client.commands import format_table, thrift_errors
from stormpy.client.nimbus_client import connect
from stormpy.errors import UserError

log = logging.getLogger(__name__)

HTTP_TIMEOUT_SECS = 10.0
MAX_TAIL_BYTES = 1024 * 1024
FOLLOW_POLL_SECS = 1.0


def _components(info: Any) -> list[str]:
    return sorted({e.component_id for e in info.executors or [] if not e.component_id.startswith("__")})


def _check_component(info: Any, component: str | None) -> None:
    known = _components(info)
    if component is not None and component not in known and component not in (info.errors or {}):
        raise UserError(f"topology {info.name!r} has no component {component!r} "
                        f"(components: {', '.join(known) or 'none running'})")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= 160 else line[:157] + "..."


def show_errors(conf: Mapping[str, Any], name: str, component: str | None) -> None:
    """Print the errors Nimbus keeps for ``name`` (one component, or all), oldest first."""
    with connect(conf) as client, thrift_errors():
        info = client.getTopologyInfo(name)
    _check_component(info, component)
    rows = []
    for comp, errors in sorted((info.errors or {}).items()):
        if component is not None and comp != component:
            continue
        for err in sorted(errors or [], key=lambda e: e.error_time_secs):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(err.error_time_secs))
            rows.append([comp, when, err.host or "", err.port or 0, _last_line(err.error)])
    if not rows:
        click.echo(f"No errors in topology {info.name!r}" + (f" component {component!r}" if component else ""))
        return
    click.echo(format_table(["COMPONENT", "TIME (UTC)", "HOST", "PORT", "ERROR"], rows))


# ---------------------------------------------------------------- logs

@dataclass
class WorkerLog:
    """One worker's log as seen through a log viewer; ``position`` is where following resumes."""

    host: str
    port: int
    file: str
    viewers: list[int]
    viewer: int | None = None
    position: int = 0
    secret: bytes | None = field(default=None, repr=False)   # signs requests to log viewers behind a login
    tls: Any = field(default=None, repr=False)               # ssl context when logviewer.tls.enable

    @property
    def label(self) -> str:
        return f"{self.host}:{self.port}"


def fetch(host: str, viewer_port: int, file: str, start: int | None, length: int,
          secret: bytes | None = None, tls: Any = None) -> tuple[int, int, bytes] | None:
    """(start, size, data) from a log viewer, or None when it has no such file (404)."""
    query = {"file": file, "length": str(length)}
    if start is not None:
        query["start"] = str(start)
    target = f"/api/v1/log?{urllib.parse.urlencode(query)}"
    headers = {}
    if secret is not None:     # a log viewer behind the UI's login lets the secret's holders in
        headers[LOG_SIGNATURE_HEADER] = sign_log_request(secret, target)
    scheme = "https" if tls is not None else "http"     # tls: client context when logviewer.tls.enable
    request = urllib.request.Request(f"{scheme}://{host}:{viewer_port}{target}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECS, context=tls) as resp:
            return int(resp.headers["X-Log-Start"]), int(resp.headers["X-Log-Size"]), resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise UserError(f"log viewer {host}:{viewer_port} answered {exc.code}: {exc.read().decode(errors='replace').strip()}") from None
    except (urllib.error.URLError, OSError) as exc:
        log.debug("log viewer %s:%d unreachable: %s", host, viewer_port, exc)
        return None


def worker_logs(conf: Mapping[str, Any], name: str, component: str | None) -> tuple[str, list[WorkerLog]]:
    """The topology id and the workers (running ``component``, or all) with their host's log viewers."""
    with connect(conf) as client, thrift_errors():
        info = client.getTopologyInfo(name)
        cluster = client.getClusterInfo()
    _check_component(info, component)
    slots = sorted({(e.host, e.port) for e in info.executors or []
                    if component is None or e.component_id == component})
    if not slots:
        raise UserError(f"topology {info.name!r} has no running executors"
                        + (f" of component {component!r}" if component else ""))
    viewers: dict[str, list[int]] = {}
    for sup in cluster.supervisors or []:
        if sup.logviewer_port:
            viewers.setdefault(sup.host, []).append(int(sup.logviewer_port))
    secret = read_secret(conf)
    from stormpy import tls

    context = tls.client_context(conf) if tls.enabled(conf, "logviewer") else None
    return info.id, [WorkerLog(host, port, f"{info.id}/{port}/worker.log", viewers.get(host, []), secret=secret,
                               tls=context)
                     for host, port in slots]


def tail(worker: WorkerLog, lines: int) -> list[str] | None:
    """The last ``lines`` lines of the worker's log (None: no log viewer has it); sets ``position``."""
    length = max(4096, lines * 200)
    for viewer in ([worker.viewer] if worker.viewer else worker.viewers):
        while True:
            got = fetch(worker.host, viewer, worker.file, None, length, worker.secret, worker.tls)
            if got is None:
                break
            start, size, data = got
            text = data.decode(errors="replace").splitlines()
            if start > 0 and len(text) <= lines and length < MAX_TAIL_BYTES:
                length = min(MAX_TAIL_BYTES, length * 4)     # lines are longer than guessed: read more
                continue
            if start > 0 and text:
                text = text[1:]                             # the first line is cut
            worker.viewer, worker.position = viewer, size
            return text[-lines:] if lines else []
    return None


def _missing(worker: WorkerLog) -> str:
    tried = ", ".join(f"{worker.host}:{p}" for p in worker.viewers) or "none published for this host"
    return f"no log viewer has {worker.file} (log viewers tried: {tried})"


def show_logs(conf: Mapping[str, Any], name: str, component: str | None, lines: int, follow: bool) -> None:
    """Print the last ``lines`` of each worker's log; with ``follow`` keep printing new lines."""
    _, workers = worker_logs(conf, name, component)
    found = []
    for worker in workers:
        text = tail(worker, lines)
        if text is None:
            click.echo(f"stormpy: warning: worker {worker.label}: {_missing(worker)}", err=True)
            continue
        found.append(worker)
        if len(workers) > 1:
            click.echo(f"==> {worker.label} {worker.file} <==")
        for line in text:
            click.echo(line)
    if not found:
        raise UserError(f"no worker log of {name!r} could be read: {_missing(workers[0])}")
    if follow:
        _follow(found)


def _follow(workers: list[WorkerLog]) -> None:
    """Poll each worker's log viewer for bytes past ``position`` until Ctrl-C or SIGTERM."""
    from stormpy.signals import StopOnSignals

    prefix = len(workers) > 1
    partial: dict[str, str] = {}
    with StopOnSignals(who="stormpy logs", announce=lambda message: None) as signals:
        while not signals.stop.is_set():
            for worker in workers:
                got = fetch(worker.host, worker.viewer or 0, worker.file, worker.position, MAX_TAIL_BYTES, worker.secret,
                            worker.tls)
                if got is None:
                    continue
                start, size, data = got
                if size < worker.position:          # rotated: start over in the new file
                    worker.position = 0
                    continue
                worker.position = start + len(data)
                text = partial.pop(worker.label, "") + data.decode(errors="replace")
                *complete, rest = text.split("\n")
                if rest:
                    partial[worker.label] = rest
                for line in complete:
                    click.echo(f"[{worker.label}] {line}" if prefix else line)
            signals.stop.wait(FOLLOW_POLL_SECS)
