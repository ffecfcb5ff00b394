"""Issue 26 items 1, 2 and 8 as an attacker and an operator see them: a real Nimbus process
with Thrift authentication on, the UI in-process on a real port, plain HTTP requests.

- the UI is no way around Thrift authentication: with the secret set it refuses to start
  without ``ui.users.file`` (one line, exit 1), and with one an anonymous kill, a login with the
  master secret as password and an anonymous configuration read are all refused;
- the login is a scrypt entry made by ``stormpy ui-passwd``; a plain-password line is refused;
- credentials in a topology's config are redacted in the UI, and by Nimbus for callers that
  are not the admin (no secret: everybody), but not for the holder of the secret.
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stormpy.client.nimbus_client import connect
from stormpy.client.submit import submit_topology_file
from stormpy.config import Config
from stormpy.errors import UserError
from stormpy.testing import wait_until
from stormpy.testing.processes import write_daemon_config
from stormpy.ui.server import make_server

from tests.ui.test_ui_cluster import TOPOLOGY_FILE, get, running_ui

UI_PASSWORD = "correct-ui-password-9"
CREDENTIALS = {"app.db.password": "pw-in-the-conf-1", "app.sink.url": "redis://app:pw-in-the-url-2@db:6379/0",
               "topology.environment": {"API_TOKEN": "tok-in-the-env-3", "LANG": "C"}}


def _secret_file(tmp_path: Path) -> Path:
    secret = tmp_path / "secret"
    secret.write_text("the-cluster-master-secret-0123456789\n")
    secret.chmod(0o600)
    return secret


def _cli(*args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stormpy.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def _basic(user: str, password: str | bytes) -> dict[str, str]:
    raw = user.encode() + b":" + (password if isinstance(password, bytes) else password.encode())
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def _submit(conf: dict[str, Any], name: str) -> str:
    return submit_topology_file(str(TOPOLOGY_FILE), name=name, conf=Config(conf), user_overrides=CREDENTIALS)


def test_with_thrift_auth_the_ui_needs_a_hashed_login_for_actions_and_configs(
        cluster_conf: dict[str, Any], daemons: Any, tmp_path: Path) -> None:
    secret = _secret_file(tmp_path)
    conf = {**cluster_conf, "storm.thrift.auth.secret.file": str(secret)}   # ui.auth.enable left off
    daemons.start("nimbus", conf, ready_port=conf["nimbus.thrift.port"])

    # Item 1: no users file -> the UI does not start, and says why in one line.
    refused = _cli("ui", "--config", str(write_daemon_config(tmp_path / "ui.yaml", {**conf, "ui.port": 0})))
    assert refused.returncode == 1, refused.stderr
    [line] = [ln for ln in refused.stderr.splitlines() if ln.startswith("stormpy: error:")]
    assert "storm.thrift.auth.secret.file is set" in line and "ui.users.file" in line, refused.stderr

    # Item 2: plain passwords are refused; `stormpy ui-passwd` makes a scrypt entry.
    users = tmp_path / "ui-users"
    users.write_text("ops:plain-password\n")
    with pytest.raises(UserError, match="line 1 .*plain passwords are not accepted"):
        make_server(Config({**conf, "ui.users.file": str(users)}), "127.0.0.1", 0)
    users.unlink()
    made = _cli("ui-passwd", "--file", str(users), "--password-stdin", "ops", stdin=UI_PASSWORD + "\n")
    assert made.returncode == 0, made.stderr
    assert users.stat().st_mode & 0o077 == 0 and UI_PASSWORD not in users.read_text()

    topology_id = _submit(conf, "ui-auth")
    with running_ui({**conf, "ui.users.file": str(users)}) as base:
        anonymous = json.loads(get(f"{base}/api/v1/topology/{topology_id}")[2])
        assert anonymous["configuration"] == {}
        token = {"X-CSRF-Token": anonymous["antiForgeryToken"]}
        assert get(f"{base}/api/v1/cluster/configuration")[0] == 401
        for action in ("kill/0", "rebalance/0", "deactivate", "activate"):
            assert get(f"{base}/api/v1/topology/{topology_id}/{action}", "POST", token)[0] == 401, action
        master = _basic("ops", secret.read_bytes().strip())          # the master secret is no password
        assert get(f"{base}/api/v1/topology/{topology_id}/kill/0", "POST", {**token, **master})[0] == 401
        with connect(Config(conf)) as client:                          # all refused: still ACTIVE
            assert client.getTopologyInfo(topology_id).status == "ACTIVE"
            admin_conf = json.loads(client.getTopologyConf(topology_id))
        assert admin_conf["app.db.password"] == CREDENTIALS["app.db.password"]   # the admin reads its own

        # Item 8: logged in, credentials are still redacted in the UI.
        login = _basic("ops", UI_PASSWORD)
        shown = json.loads(get(f"{base}/api/v1/topology/{topology_id}", headers=login)[2])["configuration"]
        assert shown["app.db.password"] == "****" and shown["topology.environment"]["API_TOKEN"] == "****"
        assert shown["app.sink.url"] == "redis://app:****@db:6379/0" and shown["topology.environment"]["LANG"] == "C"
        status, _, body = get(f"{base}/api/v1/cluster/configuration", headers=login)
        assert status == 200 and json.loads(body)["storm.thrift.auth.secret.file"] == "****"

        status, _, body = get(f"{base}/api/v1/topology/{topology_id}/kill/0", "POST", {**token, **login})
        assert status == 200, body
        wait_until(lambda: not json.loads(get(f"{base}/api/v1/topology/summary", headers=login)[2])["topologies"],
                   60, "the topology killed by the logged-in POST")


def test_nimbus_redacts_credentials_for_callers_that_are_not_the_admin(
        cluster_conf: dict[str, Any], daemons: Any) -> None:
    """Without the secret nobody is the admin: getTopologyConf hides credential-looking values."""
    daemons.start("nimbus", cluster_conf, ready_port=cluster_conf["nimbus.thrift.port"])
    topology_id = _submit(cluster_conf, "redacted")
    with connect(Config(cluster_conf)) as client:
        topo_conf = json.loads(client.getTopologyConf(topology_id))
        page_conf = json.loads(client.getTopologyPageInfo(topology_id, ":all-time", False).topology_conf)
    for seen in (topo_conf, page_conf):
        assert seen["app.db.password"] == "****" and seen["topology.environment"]["API_TOKEN"] == "****"
        assert seen["app.sink.url"] == "redis://app:****@db:6379/0" and seen["topology.name"] == "redacted"
        assert "pw-in-the" not in json.dumps(seen)
