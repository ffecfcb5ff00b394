"""Thrift authentication with a shared secret (DESIGN 13): a real ThriftServer on a real port."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from thriftpy2.thrift import TApplicationException

from stormpy.auth import AuthError, read_secret
from stormpy.client.nimbus_client import connect, open_client
from stormpy.errors import UserError
from stormpy.nimbus.server import ThriftServer
from stormpy.testing import free_port
from stormpy.thrift import storm

from tests.nimbus.test_thrift_server_limits import ConfHandler

SECRET = b"correct horse battery staple 42"


class LeaderHandler(ConfHandler):
    """A lone Nimbus: ``connect`` asks the seed who leads (``getLeader``) before using it."""

    port = 0

    def getLeader(self) -> storm.NimbusSummary:  # noqa: N802 - the IDL's name
        return storm.NimbusSummary(host="127.0.0.1", port=self.port, uptime_secs=1, isLeader=True, version="test")


@pytest.fixture
def secured() -> Iterator[ThriftServer]:
    handler = LeaderHandler()
    handler.port = free_port()
    srv = ThriftServer(handler, "127.0.0.1", handler.port, max_frame_bytes=1 << 20, secret=SECRET).start()
    try:
        yield srv
    finally:
        srv.stop("test done")


def test_clients_with_the_secret_are_served(secured: ThriftServer) -> None:
    client = open_client("127.0.0.1", secured.port, 10, SECRET)
    try:
        assert json.loads(client.getNimbusConf()) == {"ok": True}
        assert json.loads(client.getNimbusConf()) == {"ok": True}
    finally:
        client.close()


def test_an_unauthenticated_client_gets_one_clear_error(secured: ThriftServer,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    client = open_client("127.0.0.1", secured.port, 10)
    try:
        with pytest.raises(TApplicationException, match="authentication required"):
            client.getNimbusConf()
    finally:
        client.close()
    assert any("refused an unauthenticated Thrift client" in r.getMessage() for r in caplog.records)


def test_a_wrong_secret_is_refused_both_ways(secured: ThriftServer) -> None:
    with pytest.raises(AuthError, match="does not know the shared secret"):
        open_client("127.0.0.1", secured.port, 10, b"another secret of enough length")


def test_connect_reads_the_secret_file_and_says_what_failed(secured: ThriftServer, tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_bytes(SECRET + b"\n")
    bad.write_bytes(b"x" * 32)
    good.chmod(0o600)
    bad.chmod(0o600)
    conf = {"nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": secured.port}
    with connect({**conf, "storm.thrift.auth.secret.file": str(good)}) as client:
        assert json.loads(client.getNimbusConf()) == {"ok": True}
    with pytest.raises(UserError, match="authentication failed"):
        with connect({**conf, "storm.thrift.auth.secret.file": str(bad)}):
            pass
    with pytest.raises(UserError, match="storm.thrift.auth.secret.file"):
        read_secret({"storm.thrift.auth.secret.file": str(tmp_path / "missing")})


def test_an_authenticating_client_against_an_open_nimbus_fails_clearly(tmp_path: Path) -> None:
    srv = ThriftServer(ConfHandler(), "127.0.0.1", free_port(), max_frame_bytes=1 << 20).start()
    try:
        with pytest.raises(AuthError):
            open_client("127.0.0.1", srv.port, 10, SECRET)
    finally:
        srv.stop("test done")


def test_a_world_readable_secret_file_is_refused_at_start(tmp_path: Path) -> None:
    """Issue 26 item 8: refused (one line, exit 1) by daemons and clients alike, not just warned."""
    import subprocess
    import sys

    from stormpy.testing.processes import write_daemon_config

    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    secret.chmod(0o644)
    config = write_daemon_config(tmp_path / "storm.yaml", {"storm.thrift.auth.secret.file": str(secret),
                                                             "storm.local.dir": str(tmp_path / "local"),
                                                             "storm.log.dir": str(tmp_path / "logs"),
                                                             "nimbus.thrift.port": free_port(), "ui.port": 0})
    for command in ("list", "nimbus", "ui"):
        done = subprocess.run([sys.executable, "-m", "stormpy.cli", command, "--config", str(config)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, (command, done.stderr)
        assert done.stderr.strip() == (f"stormpy: error: the shared secret file {secret} is "
                                                        f"world-readable: run `chmod 600 {secret}` "
                                                        "(storm.thrift.auth.secret.file)"), done.stderr
    with pytest.raises(UserError, match="world-readable"):
        read_secret({"storm.thrift.auth.secret.file": str(secret)})
