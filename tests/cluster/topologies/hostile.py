"""A hostile topology for test_cluster_hostile.py: its spout, inside a running worker, tries to
reach what a topology must not (the cluster's shared secret, the supervisor's config, another
topology's ZooKeeper nodes, killTopology on another topology) and writes what happened to
``<test.out.dir>/hostile-report.json``. Each attempt records ``"ok"`` or the error it met;
the test asserts every one failed. It also records what it can see of itself (its config file,
environment, argv, the command lines of every process on the host) so the test can check that
none of it holds the cluster's credentials."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from cluster_common import write_json

from stormpy import Spout, Topology


def _attempt(action) -> str:
    """``"ok: <result>"`` or ``"<ExceptionType>: <text>"``."""
    try:
        return f"ok: {str(action())[:200]}"
    except BaseException as exc:  # noqa: BLE001 - every outcome is the report
        return f"{type(exc).__name__}: {exc}"


def _own_conf_file() -> Path:
    return Path(sys.argv[sys.argv.index("--conf") + 1])


def _all_cmdlines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                pass
    return lines


def _zookeeper(conf: dict, auth: bool):
    from kazoo.client import KazooClient

    from stormpy.tls import zookeeper_client_kwargs

    hosts = ",".join(f"{h}:{conf['storm.zookeeper.port']}" for h in conf["storm.zookeeper.servers"])
    payload = conf.get("storm.zookeeper.topology.auth.payload")
    client = KazooClient(hosts=hosts,     # no chroot: kazoo would probe the root node, refused too
                         auth_data=[("digest", payload)] if auth and payload else None,
                         **zookeeper_client_kwargs(conf))     # TLS with the workers' certificate
    client.start(timeout=20)
    return client


class HostileSpout(Spout):
    outputs = ["n"]

    def initialize(self, stormconf, context):
        self.out = Path(stormconf["test.out.dir"])
        self.stormconf = dict(stormconf)
        self.done = False

    def next_tuple(self):
        if self.done:
            return
        self.done = True
        write_json(self.out / "hostile-report.json", self.attack())

    def attack(self) -> dict:
        victim = self.stormconf["test.victim.id"]
        own_id = sys.argv[1]     # python -m stormpy.worker <topology-id> <supervisor-id> <port> ...
        conf_file = _own_conf_file()
        report: dict = {"uid": os.getuid(), "argv": sys.argv, "environ": dict(os.environ),
                        "cmdlines": _all_cmdlines()}
        report["own_conf"] = conf_file.read_text()
        conf = json.loads(conf_file.read_text())
        report["own_conf_keys"] = sorted(conf)
        # every file on the host's cluster directories this worker can read (the test checks that
        # none holds the cluster's credentials and that none is another topology's or a daemon's)
        readable, texts = [], []
        for top in self.stormconf["test.scan.dirs"]:       # every directory, as the test saw them
            try:
                names = os.listdir(top)
            except OSError:
                continue
            for name in names:
                path = Path(top, name)
                try:
                    if not path.is_file():
                        continue
                    with path.open("rb") as f:
                        data = f.read(1_000_000)
                except OSError:
                    continue
                readable.append(str(path))
                texts.append(data.decode(errors="replace"))
        report["readable_files"] = readable
        (self.out / "hostile-readable.txt").write_text("\n".join(texts))
        # (a) the cluster's shared secret, at the path the operator configured
        report["read_secret"] = _attempt(Path(self.stormconf["test.secret.file"]).read_bytes)
        # (b) the supervisor's config file and its process environment
        report["read_supervisor_conf"] = _attempt(Path(self.stormconf["test.supervisor.conf"]).read_text)
        report["read_supervisor_environ"] = _attempt(
            Path(f"/proc/{self.stormconf['test.supervisor.pid']}/environ").read_bytes)
        report["read_other_topology_code"] = _attempt(
            Path(self.stormconf["test.victim.stormconf"]).read_text)
        # (c) ZooKeeper: the other topology's nodes, with this worker's own identity and without
        root = conf["storm.zookeeper.root"].rstrip("/")
        with_own = _zookeeper(conf, auth=True)
        anonymous = _zookeeper(conf, auth=False)
        try:
            report["zk_list_assignments"] = _attempt(lambda: with_own.get_children(f"{root}/assignments"))
            report["zk_read_victim_assignment"] = _attempt(lambda: with_own.get(f"{root}/assignments/{victim}"))
            report["zk_read_victim_storm"] = _attempt(lambda: with_own.get(f"{root}/storms/{victim}"))
            report["zk_list_victim_heartbeats"] = _attempt(lambda: with_own.get_children(f"{root}/workerbeats/{victim}"))
            report["zk_write_victim_heartbeat"] = _attempt(
                lambda: with_own.create(f"{root}/workerbeats/{victim}/forged-1", b"x"))
            report["zk_delete_victim_storm"] = _attempt(lambda: with_own.delete(f"{root}/storms/{victim}"))
            report["zk_anonymous_read_victim"] = _attempt(lambda: anonymous.get(f"{root}/assignments/{victim}"))
            # the control: the same client may read its own topology's assignment
            report["zk_read_own_assignment"] = _attempt(lambda: with_own.get(f"{root}/assignments/{own_id}"))
        finally:
            for client in (with_own, anonymous):
                client.stop()
                client.close()
        # (d) Thrift: killTopology on the other topology, with this worker's config, and with the
        # shared secret's path added (as an attacker who knows where it lives would)
        from stormpy.client.nimbus_client import connect

        def kill(extra: dict) -> str:
            with connect({**conf, **extra}) as client:
                client.killTopology(self.stormconf["test.victim.name"])
            return "killed"

        # (e) the data plane: a tuple for the other topology's count tasks, over CURVE with this
        # topology's own keys (the test checks that no count of "FORGED" appears)
        report["curve_forge_victim"] = _attempt(lambda: self.forge(conf))
        report["thrift_kill_victim"] = _attempt(lambda: kill({}))
        report["thrift_kill_victim_with_secret_path"] = _attempt(
            lambda: kill({"storm.thrift.auth.secret.file": self.stormconf["test.secret.file"]}))
        return report


    def forge(self, conf: dict) -> str:
        import msgpack
        import zmq

        secret = conf["storm.messaging.curve.topology.secretkey"].encode()
        frame = msgpack.packb([[task, [("default", self.stormconf["test.victim.split.task"], ["FORGED"], None)]]
                               for task in self.stormconf["test.victim.count.tasks"]])
        ctx = zmq.Context()
        try:
            push = ctx.socket(zmq.PUSH)
            push.setsockopt(zmq.LINGER, 0)
            push.curve_secretkey = secret
            push.curve_publickey = zmq.curve_public(secret)
            push.curve_serverkey = zmq.curve_public(secret)     # the victim's public key is not ours to know
            push.connect(f"tcp://127.0.0.1:{self.stormconf['test.victim.port']}")
            try:
                push.send(frame, zmq.NOBLOCK)
                return "queued"
            except zmq.Again:
                return "no connection"
            finally:
                import time
                time.sleep(2)
                push.close()
        finally:
            ctx.term()


class Hostile(Topology):
    config = {"topology.max.spout.pending": 10}
    attacker = HostileSpout.spec(par=1)
