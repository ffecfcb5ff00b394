"""The UI in-process against a real Nimbus process and the session's real ZooKeeper.

Checks what only a real Nimbus can: the Thrift structs it returns really render, and its
NotAliveException becomes a 404. The daemons fixture stops Nimbus at teardown, also on failure;
the UI server thread is stopped by ``running_ui``.
"""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stormpy.client.submit import submit_topology_file
from stormpy.config import Config
from stormpy.testing import wait_until
from stormpy.ui.server import make_server

TOPOLOGY_FILE = Path(__file__).resolve().parent / "topologies" / "ui_numbers.py"


@contextmanager
def running_ui(conf: dict[str, Any]) -> Iterator[str]:
    """The UI on a free port, served from a thread; yields its base URL."""
    server = make_server(Config(conf), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="ui-test", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def get(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers or {}),
                                    timeout=30) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers["Content-Type"], exc.read()


def test_ui_over_real_nimbus(cluster_conf: dict[str, Any], daemons: Any) -> None:
    daemons.start("nimbus", cluster_conf, ready_port=cluster_conf["nimbus.thrift.port"])
    with running_ui(cluster_conf) as base:
        status, ctype, body = get(base + "/api/v1/cluster/summary")
        assert status == 200 and ctype.startswith("application/json"), body
        summary = json.loads(body)
        assert (summary["supervisors"], summary["topologies"], summary["slotsTotal"]) == (0, 0, 0)
        assert isinstance(summary["nimbusUptimeSeconds"], int)

        status, _, body = get(base + "/api/v1/topology/summary")
        assert status == 200 and json.loads(body) == {"topologies": []}

        status, _, body = get(base + "/api/v1/nimbus/summary")
        assert status == 200 and json.loads(body)["nimbuses"], body

        status, _, body = get(base + "/api/v1/topology/nosuch-1-1")
        assert status == 404 and json.loads(body)["error"] == "Not Found", body

        status, ctype, body = get(base + "/")
        assert status == 200 and ctype.startswith("text/html")
        html = body.decode()
        assert "Cluster Summary" in html and "No topologies running" in html


def test_ui_shows_and_controls_a_submitted_topology(cluster_conf: dict[str, Any], daemons: Any) -> None:
    daemons.start("nimbus", cluster_conf, ready_port=cluster_conf["nimbus.thrift.port"])
    conf = Config(cluster_conf)
    topology_id = submit_topology_file(str(TOPOLOGY_FILE), name="ui-numbers", conf=conf, user_overrides={})
    with running_ui(cluster_conf) as base:
        status, _, body = get(base + "/api/v1/topology/summary")
        [summary] = json.loads(body)["topologies"]
        assert (summary["id"], summary["name"], summary["status"]) == (topology_id, "ui-numbers", "ACTIVE")

        status, _, body = get(f"{base}/api/v1/topology/{topology_id}?window=600")
        assert status == 200, body
        doc = json.loads(body)
        assert [(s["spoutId"], s["executors"]) for s in doc["spouts"]] == [("numbers", 2)]
        assert [(b["boltId"], b["executors"]) for b in doc["bolts"]] == [("printer", 3)]
        assert doc["msgTimeout"] == 12 and doc["configuration"]["topology.name"] == "ui-numbers"
        assert len(doc["topologyStats"]) == 4

        status, _, body = get(f"{base}/api/v1/topology/{topology_id}/component/printer")
        assert status == 200 and json.loads(body)["componentType"] == "bolt", body
        status, _, body = get(f"{base}/topology.html?id={topology_id}")
        assert status == 200 and "ui-numbers" in body.decode()

        def status_of() -> str | None:
            topologies = json.loads(get(base + "/api/v1/topology/summary")[2])["topologies"]
            return topologies[0]["status"] if topologies else None

        token = {"X-CSRF-Token": doc["antiForgeryToken"]}
        assert get(f"{base}/api/v1/topology/{topology_id}/deactivate", "POST")[0] == 403   # no token
        status, _, body = get(f"{base}/api/v1/topology/{topology_id}/deactivate", "POST", token)
        assert status == 200 and json.loads(body)["status"] == "success", body
        wait_until(lambda: status_of() == "INACTIVE", 30, "topology status INACTIVE after POST deactivate")
        status, _, body = get(f"{base}/api/v1/topology/{topology_id}/activate", "POST", token)
        assert status == 200, body
        wait_until(lambda: status_of() == "ACTIVE", 30, "topology status ACTIVE after POST activate")
        status, _, body = get(f"{base}/api/v1/topology/{topology_id}/kill/0", "POST", token)
        assert status == 200, body
        wait_until(lambda: status_of() is None, 60, "topology removed after POST kill/0")
        assert get(f"{base}/api/v1/topology/{topology_id}/activate", "POST", token)[0] == 404
