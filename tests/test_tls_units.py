"""TLS and per-principal authorization (issue 25) on a real ThriftServer, real sockets and real
certificates made by ``stormpy certs``; the authorization table without a server."""
from __future__ import annotations

import json
import logging
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy import tls
from stormpy.client.nimbus_client import connect, open_client
from stormpy.errors import UserError
from stormpy.nimbus import authz
from stormpy.nimbus.server import ThriftServer
from stormpy.testing import free_port, wait_until
from stormpy.thrift import storm

from tests.tls_helpers import CertSet, FlippingRelay, make_cert_set


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertSet:
    return make_cert_set(tmp_path_factory.mktemp("certs"))


class RecordingHandler:
    """A lone Nimbus with two topologies: ``a-topo`` (alice's) and ``b-topo`` (bob's)."""

    def __init__(self, port: int, policy: authz.Policy) -> None:
        self.port = port
        self.policy = policy
        self.killed: list[str] = []

    def getLeader(self) -> Any:  # noqa: N802 - the IDL's names
        return storm.NimbusSummary(host="127.0.0.1", port=self.port, uptime_secs=1, isLeader=True, version="t")

    def getNimbusConf(self) -> str:  # noqa: N802
        return json.dumps({"ok": True})

    def killTopology(self, name: str) -> None:  # noqa: N802
        self.killed.append(name)

    def getClusterInfo(self) -> Any:  # noqa: N802
        return storm.ClusterSummary(supervisors=[], nimbus_uptime_secs=1, topologies=[
            storm.TopologySummary(id=t, name=t, num_tasks=1, num_executors=1, num_workers=1, uptime_secs=1,
                                  status="ACTIVE") for t in ("a-topo", "b-topo")])

    def beginFileDownload(self, file: str) -> str:  # noqa: N802
        return "id"

    def topology_acl(self, name: str) -> authz.TopologyAcl | None:
        return {"a-topo": authz.TopologyAcl("alice"), "b-topo": authz.TopologyAcl("bob", frozenset({"carol"}))}.get(name)


def _server_conf(certs: CertSet, client_auth: str = "required") -> dict[str, Any]:
    return {"nimbus.thrift.tls.enable": True, "nimbus.thrift.tls.client.auth": client_auth,
            "storm.tls.certfile": certs.cert("nimbus"), "storm.tls.keyfile": certs.key("nimbus"),
            "storm.tls.cafile": certs.ca, "nimbus.admins": ["admin"], "nimbus.supervisor.users": ["nimbus"]}


@pytest.fixture
def server(certs: CertSet) -> Iterator[tuple[ThriftServer, RecordingHandler]]:
    conf = _server_conf(certs)
    port = free_port()
    handler = RecordingHandler(port, authz.Policy(conf, enforce=True))
    srv = ThriftServer(handler, "127.0.0.1", port, max_frame_bytes=1 << 20,
                       tls=tls.server_context(conf, "nimbus.thrift")).start()
    try:
        yield srv, handler
    finally:
        srv.stop("test done")


def _client_conf(certs: CertSet, user: str, port: int) -> dict[str, Any]:
    return {"nimbus.thrift.tls.enable": True, "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": port,
            **certs.client_conf(user)}


def test_a_client_with_a_cluster_certificate_is_served(server, certs) -> None:
    srv, _ = server
    with connect(_client_conf(certs, "alice", srv.port), timeout_secs=10) as client:
        assert json.loads(client.getNimbusConf()) == {"ok": True}


def test_a_plaintext_client_is_refused_and_logged(server, caplog) -> None:
    srv, handler = server
    caplog.set_level(logging.WARNING)
    client = open_client("127.0.0.1", srv.port, 5)
    with pytest.raises(Exception):
        client.killTopology("a-topo")
    client.close()
    assert handler.killed == []
    # the server's connection thread logs the refusal; the client may see its error first
    wait_until(lambda: any("TLS handshake failed" in r.getMessage() for r in caplog.records), 10,
               "the server logs the refused plaintext client")


def test_a_certificate_from_another_ca_is_refused(server, certs) -> None:
    srv, handler = server
    with pytest.raises(UserError, match="TLS failed"):
        with connect(_client_conf(certs, "mallory", srv.port), timeout_secs=10) as client:
            client.killTopology("a-topo")
    assert handler.killed == []


def test_a_server_with_a_foreign_certificate_is_refused_by_the_client(certs) -> None:
    conf = {**_server_conf(certs), "storm.tls.certfile": str(certs.dir / "foreign" / "nimbus.pem"),
            "storm.tls.keyfile": str(certs.dir / "foreign" / "nimbus-key.pem")}
    port = free_port()
    srv = ThriftServer(RecordingHandler(port, authz.Policy(conf, enforce=True)), "127.0.0.1", port,
                       max_frame_bytes=1 << 20, tls=tls.server_context(conf, "nimbus.thrift")).start()
    try:
        with pytest.raises(UserError, match="not from the CA"):
            with connect(_client_conf(certs, "alice", port), timeout_secs=10):
                pass
    finally:
        srv.stop("test done")


def test_an_expired_client_certificate_is_a_one_line_error(certs, tmp_path) -> None:
    conf = _client_conf(certs, "old", free_port())
    with pytest.raises(UserError, match=r"the certificate .*old\.pem \(storm\.tls\.certfile\) expired on"):
        tls.client_context(conf)
    conf_file = tmp_path / "client.yaml"
    conf_file.write_text(json.dumps(conf))
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", "list", "--config", str(conf_file)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "expired on" in lines[0] and "Traceback" not in result.stderr, result.stderr


def test_a_flipped_byte_in_an_authenticated_call_fails_the_call(server, certs) -> None:
    srv, handler = server
    relay = FlippingRelay(("127.0.0.1", srv.port))
    try:
        ctx = tls.client_context(certs.client_conf("admin"))
        client = open_client("127.0.0.1", relay.port, 10, tls=ctx)
        client.getNimbusConf()                 # the TLS session is up and authenticated
        relay.flip_record = len(relay.records)  # the next client record: the kill call
        with pytest.raises((ssl.SSLError, OSError, Exception)):
            client.killTopology("a-topo")
        client.close()
        assert relay.flipped == 1
        assert handler.killed == [], "an altered call was executed"
    finally:
        relay.close()


def test_users_act_on_their_own_topologies_and_admins_on_all(server, certs) -> None:
    srv, handler = server
    with connect(_client_conf(certs, "bob", srv.port), timeout_secs=10) as client:
        with pytest.raises(storm.AuthorizationException, match="belongs to 'alice'"):
            client.killTopology("a-topo")
        client.killTopology("b-topo")
        assert [t.name for t in client.getClusterInfo().topologies] == ["b-topo"]
        with pytest.raises(storm.AuthorizationException):
            client.beginFileDownload("stormdist/a-topo/stormcode.zip")
    with connect(_client_conf(certs, "admin", srv.port), timeout_secs=10) as client:
        client.killTopology("a-topo")
        assert len(client.getClusterInfo().topologies) == 2
    assert handler.killed == ["b-topo", "a-topo"]


def test_the_policy_table() -> None:
    policy = authz.Policy({"nimbus.admins": ["root"], "nimbus.supervisor.users": ["sup"],
                           "nimbus.users": ["alice", "bob", "carol"]}, enforce=True)
    acl = authz.TopologyAcl("alice", frozenset({"carol"}), frozenset({"ops"}))
    alice, bob, carol, dave = (authz.Caller(n) for n in ("alice", "bob", "carol", "dave"))
    assert policy.refusal(alice, "killTopology", acl) is None
    assert policy.refusal(carol, "rebalance", acl) is None            # listed in topology.users
    assert "belongs to 'alice'" in policy.refusal(bob, "getTopologyConf", acl)
    assert policy.refusal(authz.Caller("bob", ("ops",)), "killTopology", acl) is None   # group from the cert
    assert policy.refusal(dave, "getClusterInfo", None) == "not in nimbus.users or nimbus.groups"
    assert policy.refusal(authz.Caller("sup"), "getTopologyConf", acl) is None
    assert "may not" in policy.refusal(authz.Caller("sup"), "killTopology", acl)
    assert policy.refusal(authz.Caller("root"), "killTopology", acl) is None
    assert policy.refusal(authz.Caller(None), "getLeader", None) == "no client certificate"
    assert "no authorization rule" in policy.refusal(alice, "someNewCall", None)
    assert authz.Policy({}, enforce=False).refusal(None, "killTopology", acl) is None   # security off


def test_group_mapping_file(tmp_path: Path) -> None:
    mapping = tmp_path / "groups.yaml"
    mapping.write_text("ops: [bob]\n")
    policy = authz.Policy({"storm.group.mapping.file": str(mapping)}, enforce=True)
    assert policy.refusal(authz.Caller("bob"), "killTopology",
                          authz.TopologyAcl("alice", groups=frozenset({"ops"}))) is None


def test_certs_command_makes_a_ca_host_and_user(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "stormpy.cli", "certs"]
    for args in (["ca"], ["host", "node1", "--host", "127.0.0.1"], ["user", "alice", "--group", "ops"]):
        subprocess.run([*run, *args, "--dir", str(tmp_path)], check=True, capture_output=True, timeout=60)
    assert (tmp_path / "alice-key.pem").stat().st_mode & 0o077 == 0
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    ctx.load_cert_chain(tmp_path / "alice.pem", tmp_path / "alice-key.pem")
    bad = subprocess.run([*run, "user", "--dir", str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1


def test_zookeeper_over_tls_refuses_plaintext_and_foreign_clients(certs, tmp_path) -> None:
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    from stormpy.cluster_state.session import ZkSession
    from stormpy.testing import ZooKeeperServer, ZooKeeperUnavailable

    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=500,
                             tls=(certs.cert("nimbus"), certs.key("nimbus"), certs.ca))
    try:
        server.start(timeout=90)
    except ZooKeeperUnavailable as exc:
        pytest.fail(f"cannot start ZooKeeper: {exc}")
    try:
        conf = {"storm.zookeeper.servers": ["127.0.0.1"], "storm.zookeeper.port": server.port,
                "storm.zookeeper.root": "/tls-test", "storm.zookeeper.ssl.enable": True,
                "storm.zookeeper.connection.timeout": 20000, **certs.client_conf("nimbus")}
        from stormpy.config import load_config

        session = ZkSession(load_config(None, conf), server.hosts, "/tls-test").connect()
        try:
            session.zk.ensure_path("/hello")
            assert session.zk.exists("/hello")
        finally:
            session.close()
        for kwargs in ({}, {"use_ssl": True, "verify_certs": True, "ca": certs.ca,
                            "certfile": str(certs.dir / "foreign" / "mallory.pem"),
                            "keyfile": str(certs.dir / "foreign" / "mallory-key.pem")}):
            intruder = KazooClient(hosts=server.hosts, timeout=5, connection_retry={"max_tries": 1}, **kwargs)
            with pytest.raises(KazooTimeoutError):
                intruder.start(timeout=8)
            intruder.stop()
            intruder.close()
    finally:
        server.stop(reason="test done")


def test_the_docs_tls_commands_and_config_work(tmp_path: Path) -> None:
    """The security reference's `stormpy certs` commands run, and its storm.yaml gives working TLS
    contexts (docs/reference/security-settings.md; the docs test lists that page as run here)."""
    import shlex

    import yaml

    from stormpy.config import KEYS, load_config

    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "security-settings.md").read_text()
    section = page.split("## TLS, users and authorization", 1)[1]
    commands = section.split("```bash", 1)[1].split("```", 1)[0]
    for line in commands.strip().splitlines():
        args = shlex.split(line.split("#", 1)[0].replace("/etc/stormpy/certs", str(tmp_path)))
        assert args[0] == "stormpy"
        subprocess.run([sys.executable, "-m", "stormpy.cli", *args[1:]], check=True, capture_output=True, timeout=60)
    doc = yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0].replace("/etc/stormpy/certs", str(tmp_path)))
    assert set(doc) <= set(KEYS), set(doc) - set(KEYS)
    conf = load_config(None, doc)
    tls.server_context(conf, "nimbus.thrift")
    tls.server_context(conf, "ui")
    tls.client_context(conf)
    assert tls.client_auth_required(conf, "nimbus.thrift") and tls.zookeeper_client_kwargs(conf)["use_ssl"]


def test_the_shared_secret_handshake_runs_inside_tls(certs) -> None:
    from stormpy.auth import AuthError

    conf = _server_conf(certs, client_auth="none")
    port = free_port()
    secret = b"a-shared-secret-of-32-bytes-0123"
    srv = ThriftServer(RecordingHandler(port, authz.Policy(conf, enforce=False)), "127.0.0.1", port,
                       max_frame_bytes=1 << 20, secret=secret, tls=tls.server_context(conf, "nimbus.thrift")).start()
    try:
        ctx = tls.client_context({"storm.tls.cafile": certs.ca})      # no client certificate: client.auth none
        client = open_client("127.0.0.1", port, 10, secret, ctx)
        assert json.loads(client.getNimbusConf()) == {"ok": True}
        client.close()
        with pytest.raises(AuthError):
            open_client("127.0.0.1", port, 10, b"another-secret-of-32-bytes-45678", ctx)
    finally:
        srv.stop("test done")
