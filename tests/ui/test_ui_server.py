"""The UI's HTTP server over real sockets, with a fake Nimbus client (no ZooKeeper needed),
and ``stormpy ui`` as a real process: serves, answers 503 without Nimbus, exits 0 on SIGTERM."""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_structs import TOPOLOGY_ID, FakeNimbus, fake_connect, refusing_connect

from stormpy.auth import hash_password
from stormpy.config import Config
from stormpy.testing import DaemonProcess, free_port
from stormpy.ui.server import UIServer, make_server


class Client:
    """Minimal HTTP client for one UI server: returns (status, headers, body) and never raises on 4xx/5xx."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.headers, exc.read()

    def json(self, method: str, path: str, body: bytes | None = None, **kw: Any) -> tuple[int, Any]:
        status, headers, data = self.request(method, path, body, **kw)
        assert headers["Content-Type"].startswith("application/json"), (path, headers["Content-Type"])
        return status, json.loads(data)


def serve(server: UIServer) -> Iterator[Client]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield Client(server.port)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "UI server thread did not stop"


@pytest.fixture
def nimbus() -> FakeNimbus:
    return FakeNimbus()


@pytest.fixture
def ui(nimbus: FakeNimbus) -> Iterator[Client]:
    conf = Config({"nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": 1})
    yield from serve(make_server(conf, "127.0.0.1", 0, connect=fake_connect(nimbus)))


@pytest.fixture
def ui_without_nimbus() -> Iterator[Client]:
    conf = Config({"nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": 1})
    yield from serve(make_server(conf, "127.0.0.1", 0, connect=refusing_connect))


def test_get_summaries(ui: Client) -> None:
    status, doc = ui.json("GET", "/api/v1/cluster/summary")
    assert status == 200 and (doc["supervisors"], doc["slotsTotal"], doc["topologies"]) == (2, 8, 2)
    status, doc = ui.json("GET", "/api/v1/topology/summary")
    assert status == 200 and [t["id"] for t in doc["topologies"]] == ["alpha-2-2000", TOPOLOGY_ID]
    assert ui.json("GET", "/api/v1/supervisor/summary")[1]["supervisors"][0]["id"] == "sup-a"
    assert ui.json("GET", "/api/v1/nimbus/summary")[1]["nimbuses"][0]["host"] == "127.0.0.1"
    assert ui.json("GET", "/api/v1/cluster/configuration")[1] == {"nimbus.thrift.port": 6627}


def test_get_topology_and_component(ui: Client) -> None:
    status, doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}?window=600")
    assert status == 200 and doc["window"] == "600" and doc["spouts"][0]["spoutId"] == "words"
    assert doc["configuration"]["topology.workers"] == 2
    status, doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}/component/count")
    assert status == 200 and doc["componentType"] == "bolt" and doc["window"] == ":all-time"


def test_errors_are_json_with_storm_fields(ui: Client) -> None:
    status, doc = ui.json("GET", "/api/v1/topology/gone-1-1")
    assert status == 404 and doc == {"error": "Not Found", "errorMessage": "topology gone-1-1 is not alive"}
    status, doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}/component/nope")
    assert status == 404 and "nope" in doc["errorMessage"]
    status, doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}?window=7")
    assert status == 400 and "window" in doc["errorMessage"]
    assert ui.json("GET", "/api/v1/nothing")[0] == 404
    assert ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}/kill/0")[0] == 405


def csrf(ui: Client, topology_id: str = TOPOLOGY_ID, **extra: str) -> dict[str, str]:
    """The X-CSRF-Token header for actions on ``topology_id``, from its topology JSON."""
    return {"X-CSRF-Token": ui.json("GET", f"/api/v1/topology/{topology_id}")[1]["antiForgeryToken"], **extra}


def test_post_actions_call_nimbus_with_the_topology_name(ui: Client, nimbus: FakeNimbus) -> None:
    base = f"/api/v1/topology/{TOPOLOGY_ID}"
    token = csrf(ui)
    assert ui.json("POST", base + "/deactivate", headers=token)[1] == {"topologyOperation": "deactivate",
                                                                       "topologyId": TOPOLOGY_ID, "status": "success"}
    assert ui.json("POST", base + "/activate", headers=token)[0] == 200
    assert ui.json("POST", base + "/kill/7", headers=token)[0] == 200
    body = json.dumps({"rebalanceOptions": {"numWorkers": 3, "executors": {"count": "4"}}}).encode()
    assert ui.json("POST", base + "/rebalance/2", body, headers=csrf(ui, **{"Content-Type": "application/json"}))[0] == 200
    assert ui.json("POST", base + "/rebalance/0", headers=token)[0] == 200
    assert nimbus.calls == [("deactivate", "wordcount"), ("activate", "wordcount"), ("kill", "wordcount", 7),
                            ("rebalance", "wordcount", 2, 3, {"count": 4}), ("rebalance", "wordcount", 0, None, None)]


def test_bad_actions_are_rejected_before_nimbus_acts(ui: Client, nimbus: FakeNimbus) -> None:
    base = f"/api/v1/topology/{TOPOLOGY_ID}"
    token = csrf(ui)
    assert ui.json("POST", base + "/kill/soon", headers=token)[0] == 400
    assert ui.json("POST", base + "/rebalance/1", b"{broken", headers=token)[0] == 400
    status, doc = ui.json("POST", base + "/rebalance/1", b'{"rebalanceOptions": {"executors": {"nope": 2}}}',
                          headers=token)
    assert status == 400 and doc["errorMessage"] == "component 'nope' does not exist"
    assert ui.json("POST", "/api/v1/topology/gone-1-1/kill/0")[0] == 403   # no token for it
    status, doc = ui.json("POST", base + "/kill/0", headers={"Origin": "http://evil.example", **token})
    assert status == 403 and "cross-origin" in doc["errorMessage"]
    assert nimbus.calls == []


def test_cross_site_posts_are_refused_origin_null_and_no_token(ui: Client, nimbus: FakeNimbus) -> None:
    """Issue 10 item 4: ``Origin: null`` (sandboxed iframes, data: URLs) killed topologies."""
    base = f"/api/v1/topology/{TOPOLOGY_ID}"
    token = csrf(ui)
    status, doc = ui.json("POST", base + "/kill/0", headers={"Origin": "null", **token})
    assert status == 403 and "cross-origin" in doc["errorMessage"]
    assert ui.json("POST", base + "/kill/0", headers={"Sec-Fetch-Site": "cross-site", **token})[0] == 403
    status, doc = ui.json("POST", base + "/kill/0")          # no Origin, no token: a form post
    assert status == 403 and "X-CSRF-Token" in doc["errorMessage"]
    assert ui.json("POST", base + "/kill/0", headers={"X-CSRF-Token": "0" * 64})[0] == 403
    # by name: the token of the id does not cover it, and no token is ever issued for a name
    assert ui.json("POST", "/api/v1/topology/wordcount/kill/0", headers=token)[0] == 403
    assert nimbus.calls == []
    # the page's action forms carry the token for /static/ui.js to send
    page = ui.request("GET", f"/topology.html?id={TOPOLOGY_ID}")[2].decode()
    assert f'data-csrf-token="{token["X-CSRF-Token"]}"' in page


def test_same_origin_post_is_allowed(ui: Client, nimbus: FakeNimbus) -> None:
    origin = ui.base
    assert ui.json("POST", f"/api/v1/topology/{TOPOLOGY_ID}/activate",
                   headers={"Origin": origin, **csrf(ui)})[0] == 200
    assert nimbus.calls == [("activate", "wordcount")]


def test_html_pages_and_static_assets(ui: Client) -> None:
    status, headers, body = ui.request("GET", "/")
    html = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "Cluster Summary" in html and f"/topology.html?id={TOPOLOGY_ID}" in html
    status, _, body = ui.request("GET", f"/topology.html?id={TOPOLOGY_ID}&window=10800")
    html = body.decode()
    assert status == 200 and "Topology wordcount" in html and "<strong>3h 0m 0s</strong>" in html
    assert "&lt;b&gt;hi&lt;/b&gt;" in html and 'data-action="rebalance"' in html
    status, _, body = ui.request("GET", f"/component.html?topology_id={TOPOLOGY_ID}&id=words")
    assert status == 200 and "Spout Stats" in body.decode()
    status, _, body = ui.request("GET", "/topology.html?id=gone-1-1")
    assert status == 404 and "not alive" in body.decode()
    assert ui.request("GET", "/topology.html")[0] == 400
    status, headers, body = ui.request("GET", "/static/ui.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript") and b"fetch(" in body
    assert ui.request("GET", "/static/ui.css")[0] == 200
    assert ui.request("GET", "/static/../server.py")[0] == 404


def test_nimbus_unreachable_is_503_and_the_ui_stays_up(ui_without_nimbus: Client) -> None:
    for path in ("/api/v1/cluster/summary", f"/api/v1/topology/{TOPOLOGY_ID}"):
        status, doc = ui_without_nimbus.json("GET", path)
        assert status == 503 and doc["error"] == "Service Unavailable"
        assert "Nimbus is unreachable at 127.0.0.1:1" in doc["errorMessage"]
    status, _, body = ui_without_nimbus.request("GET", "/")
    assert status == 503 and "Nimbus is unreachable" in body.decode()
    assert ui_without_nimbus.request("GET", "/static/ui.css")[0] == 200


def test_stormpy_ui_process_serves_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    conf = {"ui.host": "127.0.0.1", "ui.port": port, "storm.log.dir": str(tmp_path / "logs"),
            "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": free_port()}
    daemon = DaemonProcess("ui", conf, tmp_path, name="ui")
    try:
        daemon.start()
        daemon.wait_for_port(port, timeout=60)
        status, doc = Client(port).json("GET", "/api/v1/cluster/summary")
        assert status == 503 and "Nimbus is unreachable" in doc["errorMessage"], doc
        assert daemon.stop(reason="test: SIGTERM must exit 0", grace_secs=20) == 0, daemon.log_tail()
    finally:
        daemon.stop(reason="test cleanup")
    assert "UI serving on http://127.0.0.1" in (tmp_path / "logs" / "ui.log").read_text()


@pytest.fixture
def ui_with_login(nimbus: FakeNimbus, tmp_path: Path) -> Iterator[Client]:
    users = tmp_path / "users"
    users.write_text(f"# ui logins\nops:{hash_password('hunter2-but-longer')}\n")
    conf = Config({"nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": 1, "ui.auth.enable": True,
                   "ui.users.file": str(users)})
    yield from serve(make_server(conf, "127.0.0.1", 0, connect=fake_connect(nimbus)))


def test_ui_login_guards_actions_and_the_topology_conf(ui_with_login: Client, nimbus: FakeNimbus) -> None:
    """DESIGN 13: with ui.auth.enable, mutating actions need a login; reading stays open but
    the topology's and the cluster's configurations are shown to logged-in users only."""
    import base64

    ui = ui_with_login
    login = {"Authorization": "Basic " + base64.b64encode(b"ops:hunter2-but-longer").decode()}
    wrong = {"Authorization": "Basic " + base64.b64encode(b"ops:guess").decode()}
    anonymous_doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}")[1]
    assert anonymous_doc["configuration"] == {}
    token = {"X-CSRF-Token": anonymous_doc["antiForgeryToken"]}
    status, headers, body = ui.request("POST", f"/api/v1/topology/{TOPOLOGY_ID}/kill/0", headers=token)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert ui.json("POST", f"/api/v1/topology/{TOPOLOGY_ID}/kill/0", headers={**token, **wrong})[0] == 401
    assert ui.json("POST", f"/api/v1/topology/{TOPOLOGY_ID}/kill/0", headers=login)[0] == 403   # still needs the token
    assert nimbus.calls == []
    assert ui.json("POST", f"/api/v1/topology/{TOPOLOGY_ID}/kill/0", headers={**token, **login})[0] == 200
    assert nimbus.calls == [("kill", "wordcount", 0)]
    doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}", headers=login)[1]
    assert doc["configuration"]["topology.workers"] == 2
    assert ui.json("GET", "/api/v1/cluster/configuration")[0] == 401
