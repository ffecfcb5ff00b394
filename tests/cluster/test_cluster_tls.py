"""TLS everywhere and per-user authorization on a real process cluster (issue 25).

One cluster for the module: Nimbus Thrift over mutual TLS (the certificate CN is the principal),
the UI and the log viewers over HTTPS, ZooKeeper on its TLS-only port, all with certificates
made by ``stormpy certs``' code. Users alice and bob submit and act through the CLI with their
own certificates; ``admin`` is in nimbus.admins. Checked: a word count runs end to end; a
plaintext client and a client from another CA are refused by Nimbus, the UI and ZooKeeper; a
relay that flips one byte of an authenticated call makes it fail without executing it; bob
cannot kill, rebalance or read the config of alice's topology (CLI, Thrift and UI), the admin
can; an expired certificate is a one-line CLI error.
"""
from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from stormpy import tls
from stormpy.auth import set_user_password
from stormpy.client.nimbus_client import open_client
from stormpy.testing import wait_until
from stormpy.thrift import storm
from test_cluster_faults import acked_ids, counts, expected_counts, run_conf, unique
from process_cluster import REPO, TOPOLOGIES

from tests.tls_helpers import FlippingRelay, make_cert_set

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

_DIR = Path(tempfile.mkdtemp(prefix="stormpy-tls-"))
atexit.register(shutil.rmtree, _DIR, True)   # also when the module is collected but its tests deselected
CERTS = make_cert_set(_DIR / "certs")
USERS_FILE = _DIR / "ui-users"
PASSWORDS = {"alice": "alice-password-1", "bob": "bob-password-22", "admin": "admin-password-333"}
for _user, _password in PASSWORDS.items():
    set_user_password(USERS_FILE, _user, _password)

CLUSTER_SUPERVISORS = 1
CLUSTER_PORTS = 2
CLUSTER_NIMBUSES = 2          # the standby replicates code from the leader over mutual TLS
CLUSTER_CONF = {
    "nimbus.thrift.tls.enable": True, "nimbus.thrift.tls.client.auth": "required",
    **CERTS.client_conf("nimbus"),                  # every daemon's host certificate (CN nimbus)
    # The UI holds the daemons' certificate and checks each logged-in user itself.
    "nimbus.admins": ["admin", "nimbus"], "nimbus.supervisor.users": ["nimbus"],
    "ui.tls.enable": True, "ui.tls.client.auth": "optional", "ui.auth.enable": True, "ui.users.file": str(USERS_FILE),
    "logviewer.tls.enable": True, "logviewer.tls.client.auth": "optional",
    "storm.zookeeper.ssl.enable": True,
    "nimbus.code.sync.freq.secs": 1,
}


@pytest.fixture(scope="module", autouse=True)
def _remove_certs():
    yield
    shutil.rmtree(_DIR, ignore_errors=True)


def cli_as(cluster: Any, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``stormpy <args>`` as ``user`` (that user's certificate); does not raise on failure."""
    conf = {k: cluster.conf[k] for k in ("storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root",
                                         "nimbus.seeds", "nimbus.thrift.port", "nimbus.thrift.tls.enable",
                                         "logviewer.tls.enable")}
    conf_file = cluster.base / f"client-{user}.yaml"
    conf_file.write_text(json.dumps({**conf, **CERTS.client_conf(user)}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "stormpy.cli", *args, "--config", str(conf_file)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=str(cluster.base))


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _refused_one_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 1, f"{result.args} should fail:\n{result.stdout}\n{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _nimbus_log(cluster: Any) -> str:
    return "\n".join(p.read_text(errors="replace") for p in cluster.base.rglob("nimbus*.log*"))


def _client(user: str, port: int) -> Any:
    return open_client("127.0.0.1", port, 20, tls=tls.client_context(CERTS.client_conf(user)))


def _ui(cluster: Any) -> str:
    return f"https://127.0.0.1:{cluster.conf['ui.port']}"


def _ui_context(user: str | None = None) -> ssl.SSLContext:
    """A client of the UI: the CA, and ``user``'s certificate when given (mallory: the foreign one)."""
    ctx = ssl.create_default_context(cafile=CERTS.ca)
    if user is not None:
        conf = CERTS.client_conf(user)
        ctx.load_cert_chain(conf["storm.tls.certfile"], conf["storm.tls.keyfile"])
    return ctx


def _ui_post(cluster: Any, topology_id: str, action: str, user: str, with_certificate: bool = False) -> int:
    """POST an action as ``user``: an HTTP basic login, or only the user's client certificate."""
    with urllib.request.urlopen(f"{_ui(cluster)}/api/v1/topology/{topology_id}", timeout=30,
                                context=_ui_context()) as resp:
        token = json.loads(resp.read())["antiForgeryToken"]
    headers = {"X-CSRF-Token": token}
    if not with_certificate:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    request = urllib.request.Request(f"{_ui(cluster)}/api/v1/topology/{topology_id}/{action}", method="POST",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30, context=_ui_context(user if with_certificate else None)) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def alice_topology(process_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path]:
    """alice's word count, submitted with her certificate and running (code shipped over TLS,
    assignments and heartbeats through ZooKeeper over TLS)."""
    out = tmp_path_factory.mktemp("out")
    name = unique("alice-wc")
    args = ["submit", str(TOPOLOGIES / "wordcount.py"), "--name", name, "--workers", "1"]
    for key, value in run_conf(out, 200).items():
        args += ["-c", f"{key}={json.dumps(value)}"]
    _ok(cli_as(process_cluster, "alice", *args))
    topology_id = wait_until(lambda: process_cluster.topology_id(name), 30, f"{name} listed")
    wait_until(lambda: len(acked_ids(out)) == 200, 180, "all 200 sentences acked")
    wait_until(lambda: counts(out) == expected_counts(200), 30, "the exact word counts")
    return name, topology_id, out


def test_outsiders_are_refused_by_nimbus_the_ui_and_zookeeper(cluster, alice_topology) -> None:
    name, topology_id, _ = alice_topology
    port = cluster.conf["nimbus.thrift.port"]
    # Nimbus: a plaintext Thrift client, and a CLI with a certificate from another CA
    plain = open_client("127.0.0.1", port, 10)
    with pytest.raises(Exception):
        plain.killTopology(name)
    plain.close()
    _refused_one_line(cli_as(cluster, "mallory", "kill", name), "TLS")
    wait_until(lambda: "TLS handshake failed" in _nimbus_log(cluster), 20, "Nimbus to log the refused handshakes")
    # UI: plain HTTP, and HTTPS with a foreign client certificate
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{cluster.conf['ui.port']}/api/v1/cluster/summary", timeout=10)
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(f"{_ui(cluster)}/api/v1/cluster/summary", timeout=10,
                               context=_ui_context("mallory")).read()
    with urllib.request.urlopen(f"{_ui(cluster)}/api/v1/cluster/summary", timeout=30, context=_ui_context()) as ok:
        assert ok.status == 200
    # ZooKeeper: a plaintext client, and a TLS client from another CA
    zk = f"127.0.0.1:{cluster.conf['storm.zookeeper.port']}"
    for kwargs in ({}, {"use_ssl": True, "verify_certs": True, "ca": CERTS.ca,
                        "certfile": str(CERTS.dir / "foreign" / "mallory.pem"),
                        "keyfile": str(CERTS.dir / "foreign" / "mallory-key.pem")}):
        intruder = KazooClient(hosts=zk, timeout=5, connection_retry={"max_tries": 1}, **kwargs)
        with pytest.raises(KazooTimeoutError):
            intruder.start(timeout=8)
        intruder.stop()
        intruder.close()
    assert cluster.topology_id(name) == topology_id, "the topology is untouched"


def test_a_flipped_byte_fails_the_call_and_nothing_is_executed(cluster, alice_topology) -> None:
    name, topology_id, _ = alice_topology
    relay = FlippingRelay(("127.0.0.1", cluster.conf["nimbus.thrift.port"]))
    try:
        client = _client("admin", relay.port)
        client.getLeader()                         # authenticated: the TLS session is up
        relay.flip_record = len(relay.records)     # the next record the client sends: the call
        with pytest.raises(Exception):
            client.deactivate(name)
        client.close()
    finally:
        relay.close()
    assert relay.flipped == 1
    wait_until(lambda: "closing TLS connection" in _nimbus_log(cluster), 20, "Nimbus to log the altered record")
    with cluster.client() as c:
        assert c.getTopologyInfo(topology_id).status == "ACTIVE", "an altered call was executed"


def test_a_user_cannot_touch_another_users_topology_and_an_admin_can(cluster, alice_topology) -> None:
    name, topology_id, _ = alice_topology
    _refused_one_line(cli_as(cluster, "bob", "kill", name, "-w", "0"), "killTopologyWithOpts refused", "'bob'")
    _refused_one_line(cli_as(cluster, "bob", "rebalance", name, "-w", "0"), "rebalance refused", "'bob'")
    assert name not in _ok(cli_as(cluster, "bob", "list")).stdout, "bob sees only his own topologies"
    bob = _client("bob", cluster.conf["nimbus.thrift.port"])
    try:
        with pytest.raises(storm.AuthorizationException):
            bob.getTopologyConf(topology_id)
        with pytest.raises(storm.AuthorizationException):
            bob.beginFileDownload(f"stormdist/{topology_id}/stormcode.zip")
    finally:
        bob.close()
    log = _nimbus_log(cluster)
    assert "refused killTopologyWithOpts to 'bob'" in log and "refused getTopologyConf to 'bob'" in log
    assert _ui_post(cluster, topology_id, "deactivate", "bob") == 403
    assert _ui_post(cluster, topology_id, "deactivate", "bob", with_certificate=True) == 403
    # alice reads her own conf; the admin rebalances and deactivates it
    alice = _client("alice", cluster.conf["nimbus.thrift.port"])
    try:
        assert json.loads(alice.getTopologyConf(topology_id))["topology.submitter.user"] == "alice"
    finally:
        alice.close()
    assert name in _ok(cli_as(cluster, "alice", "list")).stdout
    _ok(cli_as(cluster, "admin", "rebalance", name, "-w", "0"))
    assert _ui_post(cluster, topology_id, "deactivate", "admin") == 200
    with cluster.client() as c:
        wait_until(lambda: c.getTopologyInfo(topology_id).status == "INACTIVE", 30, "deactivated by the admin")
    assert _ui_post(cluster, topology_id, "activate", "alice", with_certificate=True) == 200


def test_the_standby_nimbus_replicates_code_over_mutual_tls(cluster, alice_topology) -> None:
    _, topology_id, _ = alice_topology
    local = Path(cluster.nimbus_conf(1)["storm.local.dir"])
    wait_until(lambda: (local / "nimbus" / "stormdist" / topology_id / "stormconf.json").exists(), 30,
               "the standby to download the topology's code from the leader")


def test_an_expired_certificate_is_one_line_at_the_cli(cluster) -> None:
    _refused_one_line(cli_as(cluster, "old", "list"), "old.pem", "expired on")


def test_log_viewer_over_https_serves_the_owner_only(cluster, alice_topology) -> None:
    name, topology_id, _ = alice_topology
    shown = _ok(cli_as(cluster, "alice", "logs", name, "-n", "50")).stdout
    assert "worker" in shown and topology_id in shown, shown
    [viewer] = [sup.logviewer_port for sup in cluster.supervisor_summaries() if sup.logviewer_port]
    port = next(e.port for e in cluster.topology_info(topology_id).executors)
    url = f"https://127.0.0.1:{viewer}/api/v1/log?file={topology_id}/{port}/worker.log&length=100"

    def get(user: str | None) -> int:
        ctx = ssl.create_default_context(cafile=CERTS.ca)
        if user is not None:
            ctx.load_cert_chain(CERTS.cert(user), CERTS.key(user))
        try:
            with urllib.request.urlopen(url, timeout=30, context=ctx) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert get("alice") == 200 and get("admin") == 200
    assert get("bob") == 401 and get(None) == 401
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(url.replace("https://", "http://"), timeout=10)
