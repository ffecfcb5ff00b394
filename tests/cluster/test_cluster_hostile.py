"""A hostile topology on a secured cluster (issue 25, item 3): workers hold only their own
topology's credentials and run as the submitting user (``supervisor.run.worker.as.user``).

On a real process cluster with every switch on (mutual TLS on Nimbus Thrift with the shared
secret inside it, ZooKeeper over TLS with digest ACLs, CURVE data plane) a word count submitted
by one user (its certificate) runs as that unprivileged OS user, and a hostile topology as
another. The hostile
spout, inside its running worker, tries to (a) read the shared secret file, (b) read the
supervisor's config and environment and the other topology's downloaded config, (c) read and
write the other topology's ZooKeeper nodes with its own ZooKeeper identity and anonymously,
(d) call ``killTopology`` on the other topology over Thrift, and (e) send the other topology's
workers a tuple over CURVE with its own keys; every attempt must fail, while its own assignment
stays readable (the control). Its config, environment, argv, every command line on the host and
every file it can read under the cluster's directories must not hold the secret or the
ZooKeeper payload, and none of those files may be another topology's or a daemon's config. A topology whose submitter is not
a user of the host gets one line in the supervisor's log and no worker.

Needs root (the supervisor switches users) and ``useradd``: the test creates two users and
removes them; when the interpreter, the checkout or the temporary directory lives under a
directory other users cannot pass (pyenv in ``/root``, CI's private ``TMPDIR``), that directory
gets o+x for the module and its mode back afterwards.
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from process_cluster import REPO, TOPOLOGIES, ProcessCluster, module_cluster, print_logs_if_failed
from stormpy.auth import set_user_password, topology_zookeeper_payload
from stormpy.certs import make_cert
from stormpy.testing import wait_until
from tests.tls_helpers import make_cert_set
from test_cluster_faults import acked_ids, counts, finish, run_conf, unique

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

HOSTILE_USER = "stormpy-test-hostile"
VICTIM_USER = "stormpy-test-victim"
MISSING_USER = "stormpy-no-such-user"
SECRET_TEXT = "a-cluster-secret-for-the-hostile-test-0123456789"
ZK_PAYLOAD = "stormpy:zk-pass-hostile-test"


def _why_not_possible() -> str | None:
    if os.geteuid() != 0:
        return "supervisor.run.worker.as.user needs the test to run as root (it switches users)"
    for tool in ("useradd", "userdel"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: cannot create the unprivileged worker users"
    return None


def _create_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                       check=True, capture_output=True)
        return pwd.getpwnam(name)


def _runs_as(account: pwd.struct_passwd) -> str | None:
    """None when ``account`` can run this interpreter and import stormpy; else why not."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        result = subprocess.run([sys.executable, "-c", "import stormpy.worker.worker, kazoo, zmq"],
                                user=account.pw_uid, group=account.pw_gid, extra_groups=[], env=env, cwd="/",
                                capture_output=True, text=True, timeout=60)
    except OSError as exc:
        return str(exc)
    return None if result.returncode == 0 else result.stderr.strip()[-300:]


#: Directories this module made passable for other users (o+x) -> their old mode, restored at the end.
_OPENED: dict[Path, int] = {}


def _let_users_pass(*targets: Path) -> None:
    """Give o+x to the directories above ``targets`` that other users cannot pass (pyenv under
    /root, CI's private TMPDIR); their modes come back when the module ends."""
    for target in targets:
        resolved = target.resolve()
        # the directories above it, and a directory target itself (a checkout in a 0700 mktemp dir)
        for parent in [*reversed(resolved.parents), *([resolved] if resolved.is_dir() else [])]:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                _OPENED.setdefault(parent, stat.S_IMODE(mode))
                os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)


@pytest.fixture(scope="module")
def users() -> Iterator[tuple[pwd.struct_passwd, pwd.struct_passwd]]:
    reason = _why_not_possible()
    if reason:
        pytest.skip(reason)
    created = [name for name in (HOSTILE_USER, VICTIM_USER) if not _exists(name)]
    hostile, victim = _create_user(HOSTILE_USER), _create_user(VICTIM_USER)
    try:
        if _runs_as(hostile) is not None:
            _let_users_pass(Path(sys.executable), Path(sys.prefix), REPO)
        problem = _runs_as(hostile)
        if problem is not None:
            pytest.skip(f"user {HOSTILE_USER} cannot run this interpreter: {problem}")
        yield hostile, victim
    finally:
        for path, mode in _OPENED.items():
            with contextlib.suppress(FileNotFoundError):   # a cluster's own directory, gone already
                os.chmod(path, mode)
        _OPENED.clear()
        for name in created:
            subprocess.run(["userdel", name], capture_output=True)


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture(scope="module")
def secrets() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="stormpy-hostile-secret-"))   # 0700, root's
    try:
        (directory / "secret").write_text(SECRET_TEXT + "\n")
        (directory / "secret").chmod(0o600)
        set_user_password(directory / "ui-users", "admin", "a-ui-password-for-the-hostile-test")
        make_cert_set(directory / "certs")          # CA, host "nimbus", users; plus:
        for name in ("workers", HOSTILE_USER, VICTIM_USER, MISSING_USER):
            make_cert(directory / "certs", name)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, users, secrets: Path) -> Iterator[ProcessCluster]:
    """One supervisor (both topologies on one host), workers run as their submitters."""
    base = Path(tempfile.mkdtemp(prefix="stormpy-hostile-"))
    base.chmod(0o711)   # the workers' users pass through to their own directories
    _let_users_pass(base)
    certs = secrets / "certs"
    conf = {"storm.thrift.auth.secret.file": str(secrets / "secret"),
            "storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": ZK_PAYLOAD,
            "storm.messaging.curve.enable": True, "ui.auth.enable": True,
            "ui.users.file": str(secrets / "ui-users"), "supervisor.run.worker.as.user": True,
            "nimbus.thrift.tls.enable": True, "nimbus.thrift.tls.client.auth": "required",
            "storm.tls.certfile": str(certs / "nimbus.pem"), "storm.tls.keyfile": str(certs / "nimbus-key.pem"),
            "storm.tls.cafile": str(certs / "ca.pem"), "storm.zookeeper.ssl.enable": True,
            "nimbus.admins": ["admin", "nimbus"], "nimbus.supervisor.users": ["nimbus"],
            "nimbus.users": [HOSTILE_USER, VICTIM_USER, MISSING_USER],
            "supervisor.worker.tls.certfile": str(certs / "workers.pem"),
            "supervisor.worker.tls.keyfile": str(certs / "workers-key.pem")}
    try:
        with module_cluster(request, base, 1, 3, conf) as started:
            yield started
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def logged(cluster: ProcessCluster, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    yield cluster
    print_logs_if_failed(cluster, request)


def submit_as(cluster: ProcessCluster, secrets: Path, user: str, topology_file: str, name: str,
              conf: dict) -> str:
    """``stormpy submit`` with ``user``'s certificate (the shared secret too); returns the id."""
    keys = ("storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root", "nimbus.seeds",
            "nimbus.thrift.port", "nimbus.thrift.tls.enable", "storm.thrift.auth.secret.file")
    client = {**{k: cluster.conf[k] for k in keys}, "storm.tls.certfile": str(secrets / "certs" / f"{user}.pem"),
              "storm.tls.keyfile": str(secrets / "certs" / f"{user}-key.pem"),
              "storm.tls.cafile": str(secrets / "certs" / "ca.pem")}
    conf_file = cluster.log_dir / f"client-{user}.yaml"
    conf_file.write_text(json.dumps(client))
    conf_file.chmod(0o600)
    args = ["submit", str(TOPOLOGIES / topology_file), "--name", name, "--workers", "1"]
    for key, value in conf.items():
        args += ["-c", f"{key}={json.dumps(value)}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", *args, "--config", str(conf_file)],
                            capture_output=True, text=True, timeout=120, env=env, cwd=str(cluster.base))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return wait_until(lambda: cluster.topology_id(name), 30, f"topology {name} to be listed")


def _supervisor_log(cluster: ProcessCluster) -> str:
    return (cluster.log_dir / "supervisor-0.out").read_text(errors="replace")


def _out_dir(base: Path, name: str, owner: pwd.struct_passwd) -> Path:
    out = base / name
    out.mkdir()
    os.chown(out, owner.pw_uid, owner.pw_gid)
    return out


def test_hostile_topology_reaches_nothing_of_the_cluster(logged: ProcessCluster, users, secrets: Path) -> None:
    cluster = logged
    hostile_user, victim_user = users
    victim_name, hostile_name = unique("victim-wc"), unique("hostile")
    victim_out = _out_dir(cluster.base, "victim-out", victim_user)
    hostile_out = _out_dir(cluster.base, "hostile-out", hostile_user)
    victim_id = submit_as(cluster, secrets, VICTIM_USER, "wordcount.py", victim_name, run_conf(victim_out, 10 ** 9))
    hostile_id = ""
    try:
        cluster.wait_workers(victim_id, 1)
        wait_until(lambda: len(acked_ids(victim_out)) > 50, 90, "the victim word count to ack sentences")
        supervisor = cluster.supervisors[0]
        victim_conf = Path(cluster.local_dirs()[0]) / "supervisor" / "stormdist" / victim_id / "stormconf.json"
        assert victim_conf.exists(), victim_conf
        info = cluster.topology_info(victim_id)
        hostile_id = submit_as(cluster, secrets, HOSTILE_USER, "hostile.py", hostile_name, {
            "test.victim.port": next(e.port for e in info.executors),
            "test.victim.count.tasks": [e.executor_info.task_start for e in info.executors if e.component_id == "count"],
            "test.victim.split.task": next(e.executor_info.task_start for e in info.executors
                                           if e.component_id == "split"),
            "test.out.dir": str(hostile_out), "test.victim.id": victim_id, "test.victim.name": victim_name,
            "test.secret.file": str(secrets / "secret"), "test.supervisor.conf": str(supervisor.config_path),
            "test.supervisor.pid": supervisor.pid, "test.victim.stormconf": str(victim_conf),
            "test.scan.dirs": [str(d) for d in (cluster.base, *cluster.base.rglob("*"), secrets) if d.is_dir()]})
        report_path = hostile_out / "hostile-report.json"
        wait_until(report_path.exists, 120, "the hostile spout's report")
        report = json.loads(report_path.read_text())

        # the workers run as their submitters, and their files are theirs only
        assert report["uid"] == hostile_user.pw_uid
        for topology_id, account in ((hostile_id, hostile_user), (victim_id, victim_user)):
            [proc] = cluster.worker_processes(topology_id)
            assert proc.uids().real == account.pw_uid, (topology_id, proc.uids())
            conf_file = Path(proc.cmdline()[proc.cmdline().index("--conf") + 1])
            info = conf_file.stat()
            assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (account.pw_uid, 0o600), conf_file

        failed = {key: value for key, value in report.items() if isinstance(value, str) and key != "own_conf"}
        # (a) the shared secret
        assert failed["read_secret"].startswith("PermissionError"), failed["read_secret"]
        # (b) the supervisor's config and environment, the other topology's config
        assert failed["read_supervisor_conf"].startswith("PermissionError"), failed["read_supervisor_conf"]
        assert failed["read_supervisor_environ"].startswith("PermissionError"), failed["read_supervisor_environ"]
        assert failed["read_other_topology_code"].startswith("PermissionError"), failed["read_other_topology_code"]
        # (c) ZooKeeper: nothing of the other topology, with its own identity or none
        for key in ("zk_list_assignments", "zk_read_victim_assignment", "zk_read_victim_storm",
                    "zk_list_victim_heartbeats", "zk_write_victim_heartbeat", "zk_delete_victim_storm",
                    "zk_anonymous_read_victim"):
            assert failed[key].startswith("NoAuthError"), (key, failed[key])
        assert failed["zk_read_own_assignment"].startswith("ok"), failed["zk_read_own_assignment"]
        # (d) Thrift: killTopology is refused (no secret to authenticate with, none readable)
        for key in ("thrift_kill_victim", "thrift_kill_victim_with_secret_path"):
            assert not failed[key].startswith("ok"), (key, failed[key])
        assert "authentication required" in failed["thrift_kill_victim"], failed["thrift_kill_victim"]
        assert "Permission denied" in failed["thrift_kill_victim_with_secret_path"], \
            failed["thrift_kill_victim_with_secret_path"]

        # nothing the worker sees holds the cluster's credentials: not its config, environment or
        # argv, no command line on the host, no file it can read under the cluster's directories
        # (the daemons' logs are readable, as on any host; the test harness's CLI config is not stormpy's)
        assert report["readable_files"], "the scan found not even the worker's own files"
        foreign = [path for path in report["readable_files"]
                   if victim_id in path or "victim-out" in path or "/zookeeper/data/" in path
                   or "/stormdist/" in path and hostile_id not in path
                   or path.endswith((".yaml", ".json", ".pem", "secret", "ui-users"))
                   and hostile_id not in path and not path.endswith("daemon-logs/client.yaml")
                   and "hostile-out" not in path and not path.endswith("leader-session.json")]
        assert foreign == [], f"the hostile worker can read {foreign}"
        seen = json.dumps(report) + (hostile_out / "hostile-readable.txt").read_text()
        zk_password = ZK_PAYLOAD.partition(":")[2]
        host_key = (secrets / "certs" / "nimbus-key.pem").read_text().strip().splitlines()[1]
        for credential in (SECRET_TEXT, ZK_PAYLOAD, zk_password, host_key):
            assert credential not in seen, f"the worker could see {credential!r}"
        assert "nimbus-key.pem" not in report["own_conf"] and "workers-key.pem" not in report["own_conf"]
        assert "tls-keyfile.pem" in report["own_conf"]     # its own copy of the workers' key
        assert "storm.thrift.auth.secret.file" not in report["own_conf_keys"]
        assert "storm.zookeeper.auth.payload" not in report["own_conf_keys"]
        # ...but its own topology's identity, which is no other topology's
        assert topology_zookeeper_payload(ZK_PAYLOAD, hostile_id) in report["own_conf"]
        assert topology_zookeeper_payload(ZK_PAYLOAD, victim_id) not in seen

        # the victim is untouched and still flowing, and counted no forged word
        assert cluster.topology_id(victim_name) == victim_id
        before = len(acked_ids(victim_out))
        wait_until(lambda: len(acked_ids(victim_out)) > before + 20, 60, "the victim to keep acking")
        assert "FORGED" not in counts(victim_out)
        victim_log = next((cluster.base / "supervisor-0" / "logs" / "workers-artifacts" / victim_id).rglob("worker.log"))
        wait_until(lambda: "its ZeroMQ handshake failed" in victim_log.read_text(errors="replace"), 30,
                   "the victim's worker to log the refused CURVE handshake")
    finally:
        if hostile_id:
            finish(cluster, hostile_name, hostile_id)
        finish(cluster, victim_name, victim_id)


def test_a_worker_identity_keeps_its_own_trident_state_only(logged: ProcessCluster, secrets: Path) -> None:
    """Trident's transactional state (keyed by topology name) is readable and writable with a
    worker's identity for its own topology only; Nimbus grants it at submit."""
    from kazoo.exceptions import NoAuthError

    from stormpy.auth import worker_conf
    from stormpy.cluster_state.transactional import ZkTransactionalState

    cluster = logged
    names = [unique("trident-a"), unique("trident-b")]
    ids = [submit_as(cluster, secrets, MISSING_USER, "wordcount.py", name, run_conf(cluster.base / name, 10))
           for name in names]
    states = []
    try:
        supervisor_conf = cluster.supervisor_conf(0)
        mine = ZkTransactionalState(worker_conf(supervisor_conf, ids[0]), names[0])
        theirs = ZkTransactionalState(worker_conf(supervisor_conf, ids[1]), names[1])
        intruder = ZkTransactionalState(worker_conf(supervisor_conf, ids[0]), names[1])
        states = [mine, theirs, intruder]
        mine.set("coordinator/currtx", 7)
        theirs.set("coordinator/currtx", 9)
        assert (mine.get("coordinator/currtx"), theirs.get("coordinator/currtx")) == (7, 9)
        with pytest.raises(NoAuthError):
            intruder.get("coordinator/currtx")
        with pytest.raises(NoAuthError):
            intruder.set("coordinator/currtx", 1)
        assert theirs.get("coordinator/currtx") == 9
    finally:
        for state in states:
            state.close()
        for name, topology_id in zip(names, ids):
            finish(cluster, name, topology_id)


def test_a_submitter_without_an_account_gets_no_worker(logged: ProcessCluster, secrets: Path) -> None:
    cluster = logged
    name = unique("nobody")
    out = cluster.base / "nobody-out"
    out.mkdir()
    topology_id = submit_as(cluster, secrets, MISSING_USER, "wordcount.py", name, run_conf(out, 10))
    try:
        line = (f"ERROR stormpy.supervisor.daemon [supervisor-processes] supervisor.run.worker.as.user: user "
                f"'{MISSING_USER}' (topology.submitter.user of {topology_id}) does not exist on this host; "
                "worker not started\n")
        wait_until(lambda: line in _supervisor_log(cluster), 60, "the supervisor to log the refusal")
        assert not cluster.worker_pids(topology_id)
        assert not (cluster.base / "supervisor-0" / "logs" / "workers-artifacts" / topology_id).exists()
        assert "SECURITY: workers run as this supervisor's account" not in _supervisor_log(cluster)
        assert "process step failed" not in _supervisor_log(cluster)      # a refusal, not a crash
    finally:
        finish(cluster, name, topology_id)


def test_run_as_user_needs_a_root_supervisor(users) -> None:
    """A supervisor not running as root refuses the switch at start: one line, exit 1."""
    hostile, _ = users
    home = Path(tempfile.mkdtemp(prefix="stormpy-unprivileged-"))
    _let_users_pass(home)
    try:
        _supervisor_as(hostile, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _supervisor_as(hostile: pwd.struct_passwd, home: Path) -> None:
    os.chown(home, hostile.pw_uid, hostile.pw_gid)
    conf = home / "storm.yaml"
    conf.write_text(json.dumps({"storm.local.dir": str(home / "local"), "storm.log.dir": str(home / "logs"),
                                "storm.zookeeper.port": 1, "supervisor.run.worker.as.user": True}))
    os.chown(conf, hostile.pw_uid, hostile.pw_gid)
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", "supervisor", "--config", str(conf)],
                            user=hostile.pw_uid, group=hostile.pw_gid, extra_groups=[], cwd=str(home),
                            env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines()[-1].endswith(
        "supervisor.run.worker.as.user needs the supervisor to run as root (it starts each worker as its "
        "topology's submitter)"), result.stderr


# One worker's life as its submitter: the Worker reads the config its supervisor wrote (as
# python -m stormpy.worker does), a stateful bolt opens its state with a task's config (the
# topology's, every default filled in) and commits one transaction.
WORKER_LIFE = """
import json, sys
from stormpy import config as cfg
from stormpy.stateful.state import open_state, sqlite_path
from stormpy.worker.worker import Worker
Worker(json.load(open(sys.argv[1])), "topo-1", "sup-1", 6700, sys.argv[2])
conf = dict(cfg.Config({"topology.name": "counter", "topology.state.provider": "sqlite"}))
state = open_state(conf, "counter/count/3")
seen = state.get("n", 0)
state.put("n", seen + 1)
state.prepare_commit(seen + 1)
state.commit(seen + 1)
state.close()
print(seen, sqlite_path(conf))
"""


def test_a_restarted_worker_run_as_its_submitter_reads_its_last_state(users) -> None:
    """A worker run as its submitter starts in its own worker directory, which the supervisor
    removes with it: the default SQLite state must live elsewhere, or each restart (a new worker
    id) starts from nothing. Two workers in turn, the second reads what the first committed."""
    from stormpy import disk_layout
    from stormpy.supervisor import localstate
    from stormpy.supervisor.launcher import Launcher

    hostile, _ = users
    base = Path(tempfile.mkdtemp(prefix="stormpy-state-as-user-"))
    _let_users_pass(base)
    try:
        local = base / "local"
        disk_layout.stormdist_dir(local, "topo-1").mkdir(parents=True)     # the topology's code, lent
        launcher = Launcher({"storm.local.dir": str(local), "storm.log.dir": str(base / "logs"),
                             "supervisor.run.worker.as.user": True}, "sup-1")
        seen = []
        for worker_id in ("worker-1", "worker-2"):
            pid = launcher.launch("topo-1", 6700, worker_id, topology_conf={"topology.submitter.user": HOSTILE_USER},
                                  python="/bin/true")      # the directories and config, no worker process
            launcher._children[pid].wait()
            life = subprocess.run([sys.executable, "-c", WORKER_LIFE,
                                   str(localstate.worker_conf_path(launcher.local_dir, worker_id)), worker_id],
                                  user=hostile.pw_uid, group=hostile.pw_gid, extra_groups=[], umask=0o077,
                                  cwd=disk_layout.worker_dir(local, worker_id),
                                  env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                                  timeout=60)
            assert life.returncode == 0, life.stderr
            count, path = life.stdout.split()
            seen.append(int(count))
            disk_layout.remove_worker_dir(local, worker_id)     # as the supervisor does with a dead worker
        assert seen == [0, 1], "the restarted worker did not read what the last one committed"
        assert Path(path) == disk_layout.user_state_dir(local, hostile.pw_uid) / "kv_state.db"
        assert (Path(path).stat().st_uid, stat.S_IMODE(Path(path).stat().st_mode)) == (hostile.pw_uid, 0o600)
        assert stat.S_IMODE(Path(path).parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(Path(path).parent.parent.stat().st_mode) == 0o711      # users/: enter, not list
    finally:
        shutil.rmtree(base, ignore_errors=True)
