"""``stormpy ui``: an HTTP server with Storm's JSON API under ``/api/v1/`` and plain HTML pages.

Every request opens its own short Nimbus connection (``stormpy.client.nimbus_client.connect``),
so a restarted or moved Nimbus is picked up on the next request and a Nimbus that is down costs
one failed request (503 with a message saying where we looked), never the UI itself.

Threads: ``ThreadingHTTPServer`` runs each request on its own daemon thread; ``UIApp``'s only
mutable state is the charts' ``History`` (which locks itself), fed by the requests and by the
``Sampler`` thread that ``run_ui`` starts and ``UIServer.server_close`` stops. ``run_ui`` serves from a background thread while the
main thread waits for SIGTERM/SIGINT, because ``server.shutdown()`` blocks until
``serve_forever`` returns and so cannot be called from the thread that runs it.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from thriftpy2.transport import TTransportException

import stormpy
from stormpy.auth import HttpLogins, http_login_required
from stormpy import tls
from stormpy.nimbus import authz
from stormpy.tls import TLSServerMixin, https_context, peer_principal
from stormpy.config import (NIMBUS_SEEDS, NIMBUS_THRIFT_PORT, STORM_LOCAL_DIR, STORM_LOG_DIR, TOPOLOGY_SUBMITTER_USER,
                            UI_HOST, UI_PORT, UI_TIMESERIES_SAMPLE_SECS, Config, redacted)
from stormpy.daemon_guard import local_dir_lock, warn_if_open
from stormpy.errors import UserError
from stormpy.logs import add_file_log, daemon_log_path
from stormpy.signals import StopOnSignals
from stormpy.thrift import storm
from stormpy.ui import api, charts, graph, metrics, pages
from stormpy.ui.history import History, Sampler

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
#: Attribute of a request's headers object (not a header: a client cannot set it) carrying the
#: CN of the TLS client certificate the handshake verified.
TLS_PRINCIPAL_ATTR = "stormpy_tls_principal"
NIMBUS_TIMEOUT_SECS = 20.0
Connect = Callable[[Config], AbstractContextManager[Any]]
JSON_TYPE = "application/json; charset=utf-8"
HTML_TYPE = "text/html; charset=utf-8"
# Pages load their script and style from /static/ only, so an injected <script> could not run.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


@dataclass
class Response:
    """What a handler produced; the request handler turns it into bytes on the socket."""

    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    """A parsed request as handlers see it: path parameters, query (last value wins), body."""

    params: dict[str, str]
    query: dict[str, str]
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Callable[[Request], Any]
    kind: str                        # "api" -> JSON, "page" -> HTML


def _default_connect(conf: Config) -> AbstractContextManager[Any]:
    # Imported on first use, so importing the UI (and its tests) does not need the client.
    from stormpy.client.nimbus_client import connect

    # A Nimbus that accepts but does not answer holds one request thread, for this long at most.
    return connect(conf, timeout_secs=NIMBUS_TIMEOUT_SECS, leader_wait_secs=0)   # a page must not hang


class UIApp:
    """Routes a request to its handler and maps failures to Storm's JSON errors or an HTML page.

    ``connect(conf)`` yields a Nimbus client; tests pass a fake one. ``clock`` gives epoch seconds
    for "error N seconds ago". ``history`` keeps the charts' samples (a fresh one by default).
    """

    def __init__(self, conf: Config, connect: Connect | None = None,
                 clock: Callable[[], float] = time.time, history: History | None = None) -> None:
        self.conf = conf
        self._connect = connect or _default_connect
        self._clock = clock
        # Signs the per-topology anti-forgery tokens (Storm's ``antiForgeryToken``); a new one per
        # UI process, so tokens from an earlier run stop working.
        self._csrf_key = secrets.token_bytes(32)
        # Login is on with ui.auth.enable or with Thrift authentication (else the UI would let
        # anyone do over HTTP what Nimbus refuses them); on without ui.users.file: UserError.
        self._logins = HttpLogins.from_conf(conf, "UI")
        # With principals (mutual TLS to Nimbus) the UI holds an admin certificate and checks
        # each logged-in user itself, with Nimbus's rules (a UI login is a principal).
        self._policy = authz.Policy(conf, enforce=tls.client_auth_required(conf, "nimbus.thrift"))
        certificates = tls.enabled(conf, "ui") and tls.client_auth(conf, "ui") != "none"
        if self._policy.enforce and self._logins is None and not certificates:
            raise UserError("the UI needs logins when Nimbus authorizes principals (nimbus.thrift.tls.client.auth: "
                            "required): set ui.auth.enable and ui.users.file (a UI user name is a principal), "
                            "or ui.tls.client.auth (client certificates)")
        self.history = history if history is not None else History()
        self.sampler = Sampler(self.history, lambda: self._connect(self.conf),
                               float(conf[UI_TIMESERIES_SAMPLE_SECS]))
        topo = r"/api/v1/topology/(?P<id>[^/]+)"
        table: list[tuple[str, str, Callable[[Request], Any], str]] = [
            ("GET", r"/api/v1/cluster/summary", self.on_cluster_summary, "api"),
            ("GET", r"/api/v1/cluster/configuration", self.on_cluster_configuration, "api"),
            ("GET", r"/api/v1/supervisor/summary", self.on_supervisor_summary, "api"),
            ("GET", r"/api/v1/nimbus/summary", self.on_nimbus_summary, "api"),
            ("GET", r"/api/v1/topology/summary", self.on_topology_summary, "api"),
            ("GET", topo, self.on_topology, "api"),
            ("GET", topo + r"/component/(?P<component>[^/]+)", self.on_component, "api"),
            ("GET", topo + r"/visualization", self.on_visualization, "api"),
            ("GET", topo + r"/timeseries", self.on_timeseries, "api"),
            ("GET", topo + r"/component/(?P<component>[^/]+)/timeseries", self.on_component_timeseries, "api"),
            ("POST", topo + r"/activate", self.on_activate, "api"),
            ("POST", topo + r"/deactivate", self.on_deactivate, "api"),
            ("POST", topo + r"/rebalance/(?P<wait>[^/]+)", self.on_rebalance, "api"),
            ("POST", topo + r"/kill/(?P<wait>[^/]+)", self.on_kill, "api"),
            ("GET", r"/(?:index\.html)?", self.on_index_page, "page"),
            ("GET", r"/topology\.html", self.on_topology_page, "page"),
            ("GET", r"/component\.html", self.on_component_page, "page"),
            ("GET", r"/topology_graph\.html", self.on_graph_page, "page"),
            ("GET", r"/metrics", self.on_metrics, "page"),
            ("GET", r"/favicon\.ico", self.on_favicon, "page"),
            ("GET", r"/static/(?P<name>[^/]+)", self.on_static, "page"),
        ]
        self.routes = [Route(m, re.compile(p + r"/?"), h, k) for m, p, h, k in table]

    # ------------------------------------------------------------ dispatch
    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Response:
        """Answer one request; never raises (a bug in a handler becomes a logged 500)."""
        url = urlsplit(target)
        kind = "api" if url.path.startswith("/api/") else "page"
        try:
            route, params = self._match(method, url.path)
            kind = route.kind
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            request = Request(params, query, body, headers)
            if method == "POST":
                self._check_origin(headers)
                self._check_login(headers)
                self._check_csrf(request)   # every POST route is an action on one topology
            result = route.handler(request)
        except api.ApiError as exc:
            if exc.status >= 500:
                log.warning("%s %s -> %d: %s", method, url.path, exc.status, exc.message)
            return self._error(kind, exc)
        except Exception as exc:  # noqa: BLE001 - the UI must answer, and the log keeps the trace
            log.exception("%s %s failed", method, url.path)
            return self._error(kind, api.ApiError(500, "Internal Server Error", f"{type(exc).__name__}: {exc}"))
        if isinstance(result, Response):
            return result
        if kind == "api":
            return Response(200, JSON_TYPE, json.dumps(result, indent=1, default=str).encode())
        return Response(200, HTML_TYPE, result.encode())

    def _match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        allowed = []
        for route in self.routes:
            found = route.pattern.fullmatch(path)
            if found is None:
                continue
            if route.method == method:
                return route, {k: unquote(v) for k, v in found.groupdict().items()}
            allowed.append(route.method)
        if allowed:
            raise api.ApiError(405, "Method Not Allowed", f"{path} accepts {', '.join(sorted(set(allowed)))}")
        raise api.not_found(f"no such page or API endpoint: {path}")

    @staticmethod
    def _check_origin(headers: Mapping[str, str]) -> None:
        """Refuse POSTs a browser sends from another site (a page elsewhere killing topologies).

        A first line only: browsers send Origin on cross-origin POSTs, and ``null`` from
        sandboxed frames and data: URLs, which is refused too. The anti-forgery token
        (``csrf_token``) is what every mutating action must carry."""
        origin, host = headers.get("Origin"), headers.get("Host")
        if origin is not None and (origin.strip().lower() == "null" or urlsplit(origin).netloc != host):
            raise api.ApiError(403, "Forbidden", f"cross-origin request from {origin} refused")
        if (headers.get("Sec-Fetch-Site") or "").lower() == "cross-site":
            raise api.ApiError(403, "Forbidden", "cross-site request refused")

    def logged_in(self, headers: Mapping[str, str]) -> bool:
        """True when UI login is off, or the request carries a valid HTTP basic login or came
        with a client certificate from the CA (``ui.tls.client.auth``)."""
        return self._logins is None or self._login_user(headers) is not None

    def _check_login(self, headers: Mapping[str, str], what: str = "POST") -> None:
        if not self.logged_in(headers):
            log.warning("ui: refused a %s without a valid login (UI login is on: ui.auth.enable "
                        "or storm.thrift.auth.secret.file)", what)
            raise api.ApiError(401, "Unauthorized", "this needs a login (UI login is on: ui.auth.enable or "
                                                    "storm.thrift.auth.secret.file); users are in ui.users.file")

    def csrf_token(self, topology_id: str) -> str:
        """The anti-forgery token for actions on ``topology_id``: served only in that topology's
        JSON and page (which other sites cannot read), sent back as ``X-CSRF-Token``."""
        return hmac.new(self._csrf_key, b"csrf:" + topology_id.encode(), hashlib.sha256).hexdigest()

    def _check_csrf(self, req: Request) -> None:
        topology_id = req.params.get("id") or ""
        sent = req.headers.get("X-CSRF-Token") or ""
        if not topology_id or not hmac.compare_digest(sent.encode(), self.csrf_token(topology_id).encode()):
            log.warning("ui: refused a POST on topology %r without a valid X-CSRF-Token", topology_id)
            raise api.ApiError(403, "Forbidden", "missing or wrong X-CSRF-Token: take the antiForgeryToken "
                                                 "of GET /api/v1/topology/<id> and send it as X-CSRF-Token")

    @staticmethod
    def _error(kind: str, exc: api.ApiError) -> Response:
        headers = {"WWW-Authenticate": 'Basic realm="stormpy", charset="UTF-8"'} if exc.status == 401 else {}
        if kind == "api":
            return Response(exc.status, JSON_TYPE, json.dumps(exc.to_json(), indent=1).encode(), headers)
        return Response(exc.status, HTML_TYPE, pages.render_error(exc.status, exc.error, exc.message).encode(),
                        headers)

    # ------------------------------------------------------------ Nimbus access
    def nimbus_address(self) -> str:
        seeds = self.conf.get(NIMBUS_SEEDS) or ["localhost"]
        return f"{','.join(str(s) for s in seeds)}:{self.conf[NIMBUS_THRIFT_PORT]}"

    @contextmanager
    def nimbus(self) -> Iterator[Any]:
        """A Nimbus client for one request; Thrift failures become ApiErrors (404/400/503/500)."""
        try:
            with self._connect(self.conf) as client:
                yield client
        except api.ApiError:
            raise
        except storm.NotAliveException as exc:
            raise api.not_found(exc.msg or "topology is not alive") from None
        except (storm.InvalidTopologyException, storm.IllegalStateException) as exc:
            raise api.bad_request(exc.msg) from None
        except storm.AuthorizationException as exc:
            raise api.ApiError(403, "Forbidden", exc.msg) from None
        except (UserError, OSError, TTransportException) as exc:
            # connect() failing, or Nimbus going away mid-call: the UI stays up and says where it looked.
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: BaseException) -> api.ApiError:
        if isinstance(exc, UserError):
            # nimbus_client already names every address it tried and what to check.
            return api.ApiError(503, "Service Unavailable", f"Nimbus is unreachable: {exc}")
        return api.ApiError(503, "Service Unavailable",
                            f"Nimbus is unreachable at {self.nimbus_address()} ({exc}); "
                            "is `stormpy nimbus` running? (check nimbus.seeds and nimbus.thrift.port)")

    def _now(self) -> int:
        return int(self._clock())

    @staticmethod
    def _include_sys(query: Mapping[str, str]) -> bool:
        return query.get("sys", "0") in ("1", "true")

    # ------------------------------------------------------------ GET /api/v1
    def on_cluster_summary(self, req: Request) -> dict[str, Any]:
        with self.nimbus() as client:
            return api.cluster_summary(client.getClusterInfo(), stormpy.__version__)

    def on_cluster_configuration(self, req: Request) -> dict[str, Any]:
        self._check_login(req.headers, "configuration read")     # a configuration is for logged-in users, like the topology's
        with self.nimbus() as client:
            return redacted(api.parse_conf(client.getNimbusConf()))

    def on_supervisor_summary(self, req: Request) -> dict[str, Any]:
        with self.nimbus() as client:
            return api.supervisor_summary(client.getClusterInfo())

    def on_nimbus_summary(self, req: Request) -> dict[str, Any]:
        seeds = self.conf.get(NIMBUS_SEEDS) or ["localhost"]
        with self.nimbus() as client:
            return api.nimbus_summary(client.getClusterInfo(), str(seeds[0]), self.conf[NIMBUS_THRIFT_PORT],
                                      stormpy.__version__)

    def on_topology_summary(self, req: Request) -> dict[str, Any]:
        with self.nimbus() as client:
            return api.topology_summary(client.getClusterInfo())

    def topology_doc(self, topology_id: str, query: Mapping[str, str], logged_in: bool = True,
                     headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        window = api.check_window(query.get("window"))
        with self.nimbus() as client:
            info = self._topology_info(client, topology_id)
            topology = client.getTopology(topology_id)
            conf_json = client.getTopologyConf(topology_id)
        self.history.record(info, topology)
        doc = api.topology_page(info, topology, conf_json, window, self._now(), self._include_sys(query))
        doc["antiForgeryToken"] = self.csrf_token(info.id)
        if self._logins is not None and not logged_in:
            doc["configuration"] = {}   # getTopologyConf needs authentication: not for anonymous readers
        elif not self._may_operate(headers or {}, conf_json):
            doc["configuration"] = {}   # another user's topology: Nimbus's getTopologyConf rule
        else:
            # The UI is a viewer over HTTP: credentials never reach a browser, logged in or not.
            doc["configuration"] = redacted(doc["configuration"])
        return doc

    def component_doc(self, topology_id: str, component_id: str, query: Mapping[str, str]) -> dict[str, Any]:
        window = api.check_window(query.get("window"))
        with self.nimbus() as client:
            info = self._topology_info(client, topology_id)
            topology = client.getTopology(topology_id)
        self.history.record(info, topology)
        return api.component_page(info, topology, component_id, window, self._now(), self._include_sys(query))

    def on_topology(self, req: Request) -> dict[str, Any]:
        return self.topology_doc(req.params["id"], req.query, self.logged_in(req.headers), req.headers)

    def on_component(self, req: Request) -> dict[str, Any]:
        return self.component_doc(req.params["id"], req.params["component"], req.query)

    def on_visualization(self, req: Request) -> dict[str, Any]:
        window = api.check_window(req.query.get("window"))
        with self.nimbus() as client:
            info = self._topology_info(client, req.params["id"])
            topology = client.getTopology(req.params["id"])
        self.history.record(info, topology)
        return graph.visualization(info, topology, window, self._include_sys(req.query))

    def _topology_info(self, client: Any, topology_id: str) -> Any:
        """getTopologyInfo; a topology Nimbus calls not alive leaves the charts' history too."""
        try:
            return client.getTopologyInfo(topology_id)
        except storm.NotAliveException:
            self.history.forget(topology_id)
            raise

    def _timeseries(self, topology_id: str, component_id: str | None) -> dict[str, Any]:
        # Sample now (if the last sample is old enough), so the series ends at this request.
        with self.nimbus() as client:
            info = self._topology_info(client, topology_id)
            running = {ex.component_id for ex in info.executors or []}
            if component_id is not None and component_id not in running:
                # Not running yet (no assignment) is an empty series; not declared at all is a 404.
                topology = client.getTopology(topology_id)
                if component_id not in {**(topology.spouts or {}), **(topology.bolts or {})}:
                    raise api.not_found(f"topology {topology_id} has no component {component_id!r}")
        self.history.record(info)
        return self.history.series(topology_id, component_id)

    def on_timeseries(self, req: Request) -> dict[str, Any]:
        return self._timeseries(req.params["id"], None)

    def on_component_timeseries(self, req: Request) -> dict[str, Any]:
        return self._timeseries(req.params["id"], req.params["component"])

    def on_metrics(self, req: Request) -> Response:
        with self.nimbus() as client:
            body = metrics.scrape(client)
        return Response(200, metrics.CONTENT_TYPE, body)

    # ------------------------------------------------------------ POST /api/v1
    # Nimbus acts on topology NAMES; the API (like Storm's) addresses topologies by id.
    def _login_user(self, headers: Mapping[str, str]) -> str | None:
        """The HTTP basic user, else the CN of the TLS client certificate (set on the headers by
        the request handler, never from a header a client sends), else None."""
        user = self._logins.user(headers.get("Authorization")) if self._logins is not None else None
        return user or getattr(headers, TLS_PRINCIPAL_ATTR, None)

    def _may_operate(self, headers: Mapping[str, str], conf_json: str) -> bool:
        """Whether the logged-in user owns the topology (or is listed, or an admin)."""
        if not self._policy.enforce:
            return True
        conf = api.parse_conf(conf_json)
        acl = authz.TopologyAcl.from_conf(str(conf.get(TOPOLOGY_SUBMITTER_USER.name) or ""), conf)
        return self._policy.may_operate(authz.Caller(self._login_user(headers)), acl)

    def _act(self, req: Request, operation: str, call: Callable[[Any, str], None]) -> dict[str, Any]:
        topology_id = req.params["id"]
        with self.nimbus() as client:
            name = client.getTopologyInfo(topology_id).name
            if not self._may_operate(req.headers, client.getTopologyConf(topology_id)):
                user = self._login_user(req.headers)
                log.warning("ui: refused %s of topology %s to %r: not its owner, not in topology.users, "
                            "not an admin", operation, topology_id, user)
                raise api.ApiError(403, "Forbidden", f"{user!r} may not {operation} {name}: it is not the "
                                                     "owner, not in topology.users/groups and not in nimbus.admins")
            log.info("ui: %s topology %s (%s)", operation, name, topology_id)
            call(client, name)
        return api.action_result(operation, topology_id)

    def on_activate(self, req: Request) -> dict[str, Any]:
        return self._act(req, "activate", lambda client, name: client.activate(name))

    def on_deactivate(self, req: Request) -> dict[str, Any]:
        return self._act(req, "deactivate", lambda client, name: client.deactivate(name))

    def on_rebalance(self, req: Request) -> dict[str, Any]:
        options = api.rebalance_options(req.params["wait"], req.body)
        return self._act(req, "rebalance", lambda client, name: client.rebalance(name, options))

    def on_kill(self, req: Request) -> dict[str, Any]:
        options = api.kill_options(req.params["wait"])
        return self._act(req, "kill", lambda client, name: client.killTopologyWithOpts(name, options))

    # ------------------------------------------------------------ HTML pages
    def on_index_page(self, req: Request) -> str | Response:
        try:
            with self.nimbus() as client:
                cs = client.getClusterInfo()
        except api.ApiError as exc:
            if exc.status != 503:
                raise
            # The index is where people land: say what is wrong there, in the page's own layout.
            return Response(503, HTML_TYPE, pages.render_index(None, None, None, None, unavailable=exc.message).encode())
        seeds = self.conf.get(NIMBUS_SEEDS) or ["localhost"]
        return pages.render_index(
            api.cluster_summary(cs, stormpy.__version__),
            api.nimbus_summary(cs, str(seeds[0]), self.conf[NIMBUS_THRIFT_PORT], stormpy.__version__),
            api.supervisor_summary(cs), api.topology_summary(cs))

    def on_topology_page(self, req: Request) -> str:
        topology_id = req.query.get("id")
        if not topology_id:
            raise api.bad_request("topology.html needs ?id=<topology id>")
        return pages.render_topology(self.topology_doc(topology_id, req.query, self.logged_in(req.headers),
                                                       req.headers))

    def on_component_page(self, req: Request) -> str:
        topology_id, component_id = req.query.get("topology_id"), req.query.get("id")
        if not topology_id or not component_id:
            raise api.bad_request("component.html needs ?topology_id=<topology id>&id=<component id>")
        return pages.render_component(self.component_doc(topology_id, component_id, req.query))

    def on_graph_page(self, req: Request) -> str:
        topology_id = req.query.get("id")
        if not topology_id:
            raise api.bad_request("topology_graph.html needs ?id=<topology id>")
        with self.nimbus() as client:
            info = client.getTopologyInfo(topology_id)
        return graph.render_graph_page(info.id, info.name)

    def on_favicon(self, req: Request) -> Response:
        return Response(200, "image/svg+xml", pages.FAVICON.encode(), {"Cache-Control": "max-age=86400"})

    def on_static(self, req: Request) -> Response:
        name = req.params["name"]
        asset = pages.STATIC.get(name) or graph.STATIC.get(name) or charts.STATIC.get(name)
        if asset is None:
            raise api.not_found(f"no static file {name!r}")
        content_type, text = asset
        return Response(200, content_type, text.encode(), {"Cache-Control": "max-age=300"})


class _RequestHandler(BaseHTTPRequestHandler):
    """Adapts http.server to ``UIApp.handle``; runs on the server's per-request thread."""

    server: "UIServer"
    server_version = f"stormpy-ui/{stormpy.__version__}"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        if isinstance(self.connection, ssl.SSLSocket):    # a verified client certificate is a login
            setattr(self.headers, TLS_PRINCIPAL_ATTR, peer_principal(self.connection)[0])
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            err = api.ApiError(413 if length > 0 else 400, "Bad Request",
                               f"request body must be 0..{MAX_BODY_BYTES} bytes")
            self._send(UIApp._error("api", err))
            return
        body = self.rfile.read(length) if length else b""
        self._send(self.server.app.handle(method, self.path, self.headers, body))

    def _send(self, response: Response) -> None:
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            if response.content_type.startswith("text/html"):
                self.send_header("Content-Security-Policy", CSP)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            log.debug("client %s went away before the answer was sent", self.address_string())

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        log.debug("%s %s", self.address_string(), format % args)


class UIServer(TLSServerMixin, ThreadingHTTPServer):
    """The HTTP server with its ``UIApp``; request threads are daemons so a stuck client
    cannot hold the process open at shutdown. HTTPS with ``ui.tls.enable`` (``stormpy.tls``)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: UIApp) -> None:
        self.app = app
        super().__init__(address, _RequestHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def server_close(self) -> None:
        """Close the socket and stop the charts' sampler (if it was started)."""
        self.app.sampler.stop(reason="ui server closing")
        super().server_close()


def make_server(conf: Config, host: str, port: int, connect: Connect | None = None) -> UIServer:
    """A bound (not yet serving) UI server; port 0 picks a free port (``server.port``).
    Tests call ``serve_forever`` on a thread and ``shutdown()`` + ``server_close()`` after."""
    server = UIServer((host, port), UIApp(conf, connect))
    server.tls_context = https_context(conf, "ui")
    return server


def run_ui(conf: Config) -> int:
    """``stormpy ui``: serve on ui.host:ui.port until SIGTERM or Ctrl-C, then exit 0."""
    with local_dir_lock(conf[STORM_LOCAL_DIR], "ui"):    # two UIs would share ui.log
        return _run_ui(conf)


def _run_ui(conf: Config) -> int:
    log_path = add_file_log(daemon_log_path(conf[STORM_LOG_DIR], "ui"))
    host, port = conf[UI_HOST], conf[UI_PORT]
    try:
        server = make_server(conf, host, port)
    except OSError as exc:
        raise UserError(f"UI cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    warn_if_open("UI", host, server.port, secured=http_login_required(conf))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                              name="ui-http", daemon=True)
    thread.start()
    server.app.sampler.start()
    log.info("UI serving on %s://%s:%d/ (Nimbus at %s, log %s)", "https" if server.tls_context else "http",
             host, server.port,
             server.app.nimbus_address(), log_path)
    with StopOnSignals(who="ui") as signals:
        try:
            if not signals.wait(alive=thread.is_alive):
                log.error("ui: HTTP server thread died; stopping")
                return 1
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
    log.info("ui: stopped (%s)", signals.reason("stop requested"))
    return 0
