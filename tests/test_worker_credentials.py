"""What a supervisor gives a worker (issue 25, item 3): its topology's credentials, none of the
cluster's; and who a worker runs as under ``supervisor.run.worker.as.user``."""
from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest
import zmq

from stormpy import auth
from stormpy.errors import UserError
from stormpy.supervisor.launcher import (Launcher, LaunchRefused, _give, _lend, copy_tls_files, open_worker_out,
                                        worker_env, worker_user)

PAYLOAD = "stormpy:zk-pass-for-the-unit-test"


@pytest.fixture
def supervisor_conf(tmp_path: Path) -> dict:
    secret = tmp_path / "secret"
    secret.write_text("a-cluster-secret-for-the-unit-test-0123456789\n")
    secret.chmod(0o600)
    return {"storm.thrift.auth.secret.file": str(secret), "storm.zookeeper.auth.payload": PAYLOAD,
            "storm.messaging.curve.enable": True, "ui.users.file": str(tmp_path / "ui-users"),
            "storm.tls.certfile": "/etc/host.pem", "storm.tls.keyfile": "/etc/host-key.pem",
            "nimbus.thrift.tls.keyfile": "/etc/nimbus-key.pem", "my.db.password": "hunter2",
            "storm.zookeeper.port": 2181}


def test_a_worker_conf_holds_its_topology_credentials_only(supervisor_conf: dict) -> None:
    conf = auth.worker_conf(supervisor_conf, "wc-1-100")
    for key in ("storm.thrift.auth.secret.file", "storm.zookeeper.auth.payload", "ui.users.file",
                "storm.tls.keyfile", "nimbus.thrift.tls.keyfile", "my.db.password"):
        assert key not in conf, key
    text = repr(conf)
    assert PAYLOAD not in text and PAYLOAD.partition(":")[2] not in text
    assert conf["storm.zookeeper.port"] == 2181
    assert conf["storm.zookeeper.topology.auth.payload"].startswith("topology-wc-1-100:")
    assert conf["storm.zookeeper.superACL"] == f"digest:{auth.digest_id(PAYLOAD)}"
    # the CURVE pair is the topology's, the same the daemons derive, and no other topology's
    secret = auth.read_secret(supervisor_conf)
    assert auth.curve_topology_keys(conf, "wc-1-100") == auth.curve_keys(secret, "wc-1-100")
    assert auth.curve_keys(secret, "other-2-200") != auth.curve_keys(secret, "wc-1-100")
    assert zmq.curve_public(conf["storm.messaging.curve.topology.secretkey"].encode()) == \
        auth.curve_keys(secret, "wc-1-100")[0]


def test_topology_identities_differ_and_hide_the_cluster_payload() -> None:
    one = auth.topology_zookeeper_payload(PAYLOAD, "a-1-1")
    two = auth.topology_zookeeper_payload(PAYLOAD, "b-1-1")
    assert one != two and PAYLOAD.partition(":")[2] not in one + two
    assert one == auth.topology_zookeeper_payload(PAYLOAD, "a-1-1")     # derived, never stored


def test_a_worker_asks_for_acls_of_its_own_topology_only(supervisor_conf: dict) -> None:
    conf = auth.worker_conf(supervisor_conf, "a-1-1")
    assert auth.holds_topology_identity_only(conf)
    assert not auth.holds_topology_identity_only(supervisor_conf)
    own = auth.topology_node_acl(conf, "a-1-1", writable=True)
    assert own == auth.topology_node_acl(supervisor_conf, "a-1-1", writable=True)
    assert auth.topology_node_acl(conf, "b-1-1", writable=True) is None
    auth_data, default_acl = auth.zookeeper_acl(conf)
    assert auth_data == [("digest", conf["storm.zookeeper.topology.auth.payload"])]
    assert default_acl == own


def test_without_the_switch_a_worker_runs_as_the_supervisor() -> None:
    assert worker_user({}, "t-1-1", {"topology.submitter.user": "nobody"}) is None


def test_a_missing_submitter_account_is_one_line() -> None:
    on = {"supervisor.run.worker.as.user": True}
    with pytest.raises(LaunchRefused, match=r"^supervisor.run.worker.as.user: user 'stormpy-no-such-user-x' "
                                            r"\(topology.submitter.user of t-1-1\) does not exist on this host; "
                                            r"worker not started$"):
        worker_user(on, "t-1-1", {"topology.submitter.user": "stormpy-no-such-user-x"})
    with pytest.raises(LaunchRefused, match="has no topology.submitter.user"):
        worker_user(on, "t-1-1", {})
    with pytest.raises(LaunchRefused, match="workers never run as root"):
        worker_user(on, "t-1-1", {"topology.submitter.user": pwd.getpwuid(0).pw_name})



@pytest.mark.skipif(os.geteuid() != 0, reason="skipped: changing owners needs root")
def test_a_worker_never_runs_as_the_account_that_owns_the_secret(tmp_path: Path) -> None:
    account = pwd.getpwnam("nobody")
    secret = tmp_path / "secret"
    secret.write_text("s")
    os.chown(secret, account.pw_uid, account.pw_gid)
    conf = {"supervisor.run.worker.as.user": True, "storm.thrift.auth.secret.file": str(secret)}
    with pytest.raises(LaunchRefused, match="owns storm.thrift.auth.secret.file"):
        worker_user(conf, "t-1-1", {"topology.submitter.user": "nobody"})


def test_a_worker_environment_drops_credential_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORMPY_TEST_SECRET", "s")
    monkeypatch.setenv("DB_PASSWORD", "p")
    monkeypatch.setenv("STORMPY_TEST_PLAIN", "kept")
    env = worker_env({"topology.environment": {"APP_TOKEN": "given by the topology"}}, None)
    assert "STORMPY_TEST_SECRET" not in env and "DB_PASSWORD" not in env
    assert env["STORMPY_TEST_PLAIN"] == "kept" and env["APP_TOKEN"] == "given by the topology"
    assert env["PYTHONUNBUFFERED"] == "1" and env.get("PATH") == os.environ.get("PATH")
    # an open cluster passes the supervisor's environment whole, as before (AWS keys and the like)
    open_env = worker_env({}, None, withhold_credentials=False)
    assert open_env["STORMPY_TEST_SECRET"] == "s" and open_env["DB_PASSWORD"] == "p"


def test_root_never_writes_through_a_link_the_worker_left_for_its_output(tmp_path: Path) -> None:
    """worker.log.out lives in a directory the worker's user owns: a symlink or hard link put there
    in place of the file is replaced, never opened (root would write into the target)."""
    target = tmp_path / "target"
    target.write_text("untouched")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "worker.log.out").symlink_to(target)
    fd = open_worker_out(logs / "worker.log.out")
    os.write(fd, b"worker output")
    os.close(fd)
    assert target.read_text() == "untouched"
    assert not (logs / "worker.log.out").is_symlink() and (logs / "worker.log.out").read_text() == "worker output"
    os.link(target, logs / "hard.out")
    fd = open_worker_out(logs / "hard.out")
    os.write(fd, b"more")
    os.close(fd)
    assert target.read_text() == "untouched" and target.stat().st_nlink == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="skipped: changing owners needs root")
def test_handing_over_follows_no_link_and_lends_the_code_read_only(tmp_path: Path) -> None:
    account = pwd.getpwnam("nobody")
    secret = tmp_path / "secret"
    secret.write_text("s")
    secret.chmod(0o600)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "own.txt").write_text("x")
    (tree / "link").symlink_to(secret)
    _give(tree, account, recursive=True)
    assert secret.stat().st_uid == 0 and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert (tree / "own.txt").stat().st_uid == account.pw_uid
    _lend(tree, account)   # the code: root's, the account's group may read, nobody else
    info = (tree / "own.txt").stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, account.pw_gid, 0o640)
    assert stat.S_IMODE(tree.stat().st_mode) == 0o750 and secret.stat().st_uid == 0


def test_tls_files_for_zookeeper_are_copied_into_the_worker_directory(tmp_path: Path) -> None:
    sources = {}
    for name in ("cert", "key", "ca"):
        sources[name] = tmp_path / f"{name}.pem"
        sources[name].write_text(f"-----{name}-----\n")
        sources[name].chmod(0o600)
    worker_dir = tmp_path / "worker"
    worker_dir.mkdir()
    conf = {"storm.zookeeper.ssl.enable": True, "storm.tls.certfile": str(sources["cert"]),
            "storm.tls.keyfile": str(sources["key"]), "storm.tls.cafile": str(sources["ca"])}
    copy_tls_files(conf, worker_dir)
    for key, name in (("certfile", "cert"), ("keyfile", "key"), ("cafile", "ca")):
        copy = Path(conf[f"storm.tls.{key}"])
        assert copy.parent == worker_dir and copy.read_text() == f"-----{name}-----\n"
        assert copy.stat().st_mode & 0o777 == 0o600
    plain = {"storm.tls.keyfile": str(sources["key"])}
    copy_tls_files(plain, worker_dir)     # no ZooKeeper TLS: the worker needs no key at all
    assert plain == {"storm.tls.keyfile": str(sources["key"])}


def test_run_as_user_with_zookeeper_tls_needs_a_worker_certificate(tmp_path: Path) -> None:
    conf = {"storm.local.dir": str(tmp_path / "local"), "storm.log.dir": str(tmp_path / "logs"),
            "supervisor.run.worker.as.user": True, "storm.zookeeper.ssl.enable": True}
    expected = ("supervisor.worker.tls.certfile and supervisor.worker.tls.keyfile" if os.geteuid() == 0
                else "needs the supervisor to run as root")
    with pytest.raises(UserError, match=expected):
        Launcher(conf, "sup-1")


def test_a_worker_conf_names_the_supervisors_local_dir_absolutely(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative storm.local.dir is the supervisor's, resolved where it started: a worker run as
    another user starts in its own directory, where the same words would name another place."""
    import json

    from stormpy.supervisor import localstate

    monkeypatch.chdir(tmp_path)
    launcher = Launcher({"storm.local.dir": "storm-local", "storm.log.dir": "logs"}, "sup-1")
    pid = launcher.launch("topo-1", 6700, "worker-1", python="/bin/true")   # nothing runs: the conf is the point
    launcher._children[pid].wait()
    written = json.loads(localstate.worker_conf_path(launcher.local_dir, "worker-1").read_text())
    assert written["storm.local.dir"] == str(tmp_path / "storm-local")
