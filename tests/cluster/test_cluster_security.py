"""Every security switch of DESIGN 13 on, on a real process cluster: a word count runs end to
end over authenticated Thrift, ACL'd ZooKeeper and a CURVE data plane, while an unauthenticated
Thrift client, an anonymous ZooKeeper client, a forged tuple from a process without the CURVE
keys, a UI POST without login (or with the master secret as its password) and an anonymous log
viewer read are each refused, while `stormpy logs` reads through the log viewers' login."""
from __future__ import annotations

import atexit
import base64
import json
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import msgpack
import pytest
import zmq
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from thriftpy2.thrift import TApplicationException

from stormpy.auth import set_user_password
from stormpy.client.nimbus_client import open_client
from stormpy.testing import wait_until
from test_cluster_faults import acked_ids, counts, expected_counts, finish, run_conf, unique

pytestmark = pytest.mark.timeout(300)

_SECRETS = Path(tempfile.mkdtemp(prefix="stormpy-secret-"))
atexit.register(shutil.rmtree, _SECRETS, True)   # also when the module is collected but its tests deselected
SECRET_FILE = _SECRETS / "secret"
SECRET_FILE.write_text("a-cluster-secret-for-the-security-test-0123456789\n")
SECRET_FILE.chmod(0o600)
USERS_FILE = _SECRETS / "ui-users"
UI_PASSWORD = "a-ui-password-that-is-not-the-secret"
set_user_password(USERS_FILE, "admin", UI_PASSWORD)



@pytest.fixture(scope="module", autouse=True)
def _remove_secrets():
    """The secret's directory goes when the module ends (autouse: torn down after the cluster)."""
    yield
    shutil.rmtree(_SECRETS, ignore_errors=True)


CLUSTER_SUPERVISORS = 2
CLUSTER_PORTS = 2
CLUSTER_CONF = {"storm.thrift.auth.secret.file": str(SECRET_FILE),
                "storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "stormpy:zk-pass-4-test",
                "storm.messaging.curve.enable": True, "ui.auth.enable": True,
                "ui.users.file": str(USERS_FILE)}


def _logs(base: Path) -> str:
    text = []
    for path in base.rglob("*.log*"):
        try:
            text.append(path.read_text(errors="replace"))
        except OSError:
            pass
    return "\n".join(text)


def test_secured_cluster_runs_a_word_count_and_refuses_anonymous_access(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    name = unique("secure-wc")
    total = 300
    topology_id = cluster.submit("wordcount.py", name, workers=2, conf=run_conf(out, total))
    try:
        cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(acked_ids(out)) == total, 150, f"all {total} sentences acked")
        wait_until(lambda: counts(out) == expected_counts(total), 30, "the exact word counts")

        # 1. Thrift without the secret
        port = cluster.conf["nimbus.thrift.port"]
        client = open_client("127.0.0.1", port, 10)
        try:
            with pytest.raises(TApplicationException, match="authentication required"):
                client.getTopologyConf(topology_id)
        finally:
            client.close()

        # 2. ZooKeeper without the digest
        anonymous = KazooClient(hosts=f"127.0.0.1:{cluster.conf['storm.zookeeper.port']}")
        anonymous.start(timeout=20)
        try:
            with pytest.raises(NoAuthError):
                anonymous.get_children("/storm")
            with pytest.raises(NoAuthError):
                anonymous.get_children("/storm/assignments")
        finally:
            anonymous.stop()
            anonymous.close()

        # 3. a forged tuple for a count task, sent in plain ZeroMQ to every worker port
        info = cluster.topology_info(topology_id)
        count_tasks = [e.executor_info.task_start for e in info.executors if e.component_id == "count"]
        split_task = next(e.executor_info.task_start for e in info.executors if e.component_id == "split")
        ports = {e.port for e in info.executors}
        ctx = zmq.Context()
        try:
            for worker_port in ports:
                push = ctx.socket(zmq.PUSH)
                push.setsockopt(zmq.LINGER, 0)
                push.connect(f"tcp://127.0.0.1:{worker_port}")
                frame = msgpack.packb([[task, [("default", split_task, ["FORGED"], None)]] for task in count_tasks])
                try:
                    push.send(frame, zmq.NOBLOCK)
                except zmq.Again:
                    pass   # no connection completed: refused, as it should be
                wait_until(lambda: "its ZeroMQ handshake failed" in _logs(cluster.base), 30,
                           "a worker to log the refused handshake")
                push.close()
        finally:
            ctx.term()

        # 4. UI action without login
        ui = f"http://127.0.0.1:{cluster.conf['ui.port']}"
        with urllib.request.urlopen(f"{ui}/api/v1/topology/{topology_id}", timeout=30) as resp:
            doc = json.loads(resp.read())
        assert doc["configuration"] == {}, "the topology conf is not for anonymous readers"
        request = urllib.request.Request(f"{ui}/api/v1/topology/{topology_id}/kill/0", method="POST",
                                         headers={"X-CSRF-Token": doc["antiForgeryToken"]})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401
        raw_secret = base64.b64encode(b"admin:" + SECRET_FILE.read_bytes().strip()).decode()
        with pytest.raises(urllib.error.HTTPError) as refused:   # the master secret is no UI password
            urllib.request.urlopen(urllib.request.Request(
                f"{ui}/api/v1/topology/{topology_id}/deactivate", method="POST",
                headers={"X-CSRF-Token": doc["antiForgeryToken"], "Authorization": f"Basic {raw_secret}"}), timeout=30)
        assert refused.value.code == 401
        login = base64.b64encode(f"admin:{UI_PASSWORD}".encode()).decode()
        deactivate = urllib.request.Request(f"{ui}/api/v1/topology/{topology_id}/deactivate", method="POST",
                                            headers={"X-CSRF-Token": doc["antiForgeryToken"],
                                                     "Authorization": f"Basic {login}"})
        with urllib.request.urlopen(deactivate, timeout=30) as resp:
            assert resp.status == 200

        # 5. the log viewers behind the same login: anonymous refused, `stormpy logs` signs its reads
        [viewer, *_] = [sup.logviewer_port for sup in cluster.supervisor_summaries() if sup.logviewer_port]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{viewer}/api/v1/files", timeout=30)
        assert refused.value.code == 401
        shown = cluster.cli("logs", name, "-n", "5").stdout
        assert "==> 127.0.0.1:" in shown and "answered 401" not in shown, shown   # not a bare "401": worker ids are hex

        assert "FORGED" not in counts(out)
        assert counts(out) == expected_counts(total)
        logs = _logs(cluster.base)
        assert "refused an unauthenticated Thrift client" in logs
        assert "refused a POST without a valid login" in logs
        # workers share the supervisor's account here: the supervisor says what that exposes
        assert "SECURITY: workers run as this supervisor's account" in cluster.supervisors[0].output()
    finally:
        finish(cluster, name, topology_id)
