"""A cluster of real hosts (issue 11): Linux network namespaces on a bridge, each with its own
address (``stormpy.testing.netns``). ZooKeeper and Nimbus run on host 0, a supervisor on each of
hosts 1 and 2; a word count spread over both supervisor hosts acks every tuple, and everything
advertises and binds its host's address, never 127.0.0.1. Needs root (skipped otherwise).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stormpy.client.nimbus_client import connect, open_client
from stormpy.nimbus.files import CONF_FILE
from stormpy.testing import wait_for_leader, wait_until
from stormpy.testing.netns import HostNetwork, leftovers, namespace_pids, skip_reason
from stormpy.testing.zookeeper import four_letter_word

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_cluster import FAST_TIMINGS, REPO, TOPOLOGIES  # noqa: E402
from test_cluster_faults import acked_ids, counts, run_conf  # noqa: E402

sys.path.insert(0, str(TOPOLOGIES))
from cluster_common import expected_counts  # noqa: E402

_SKIP = skip_reason()
pytestmark = [pytest.mark.skipif(_SKIP is not None, reason=_SKIP or ""), pytest.mark.timeout(300)]

ZK_PORT, NIMBUS_PORT, WORKER_PORTS = 2181, 6627, [6700, 6701]


def cli(conf: dict[str, Any], base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    conf_file = base / "client.yaml"
    conf_file.write_text(json.dumps(conf))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", *args, "--config", str(conf_file)],
                            capture_output=True, text=True, timeout=120, env=env, cwd=str(base))
    assert result.returncode == 0, f"stormpy {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def listening(host: Any, port: int) -> list[str]:
    """Local addresses listening on ``port`` inside ``host`` (``ss -ltnH``)."""
    out = host.run("ss", "-ltnH", f"sport = :{port}").stdout
    return [line.split()[3].rpartition(":")[0] for line in out.splitlines() if line.strip()]


class HostCluster:
    """ZooKeeper on host 0, Nimbus on ``nimbus_hosts``, a supervisor on each of hosts 1 and 2."""

    def __init__(self, net: HostNetwork, base: Path, nimbus_hosts: list[int]) -> None:
        self.net, self.base = net, base
        self.logs = base / "logs"
        self.logs.mkdir(exist_ok=True)
        zk_host = net.hosts[0]
        self.nimbus_hosts = [net.hosts[i] for i in nimbus_hosts]
        self.sup_hosts = net.hosts[1:3]
        self.conf = {**FAST_TIMINGS, "storm.zookeeper.servers": [zk_host.address], "storm.zookeeper.port": ZK_PORT,
                     "storm.zookeeper.root": "/storm", "nimbus.seeds": [h.address for h in self.nimbus_hosts],
                     "nimbus.thrift.port": NIMBUS_PORT, "supervisor.slots.ports": WORKER_PORTS,
                     "nimbus.code.sync.freq.secs": 1}
        del self.conf["storm.local.hostname"]   # each host sets its own
        zk = net.daemon(zk_host, "dev-zookeeper", self.host_conf(zk_host, "zk"), self.logs, name="zookeeper").start()
        zk.wait_ready(lambda: four_letter_word(zk_host.address, ZK_PORT, "ruok") == "imok", 90, "ZooKeeper on host 0")
        self.nimbuses = {}
        for host in self.nimbus_hosts:
            proc = self.nimbuses[host.address] = net.daemon(host, "nimbus", self.host_conf(host, "nimbus"), self.logs,
                                                            name=f"nimbus-{host.index}").start()
            proc.wait_for_port(NIMBUS_PORT, host=host.address, timeout=60)
        self.leader = wait_for_leader(self.conf, 60)
        for host in self.sup_hosts:
            net.daemon(host, "supervisor", self.host_conf(host, "supervisor"), self.logs,
                       name=f"supervisor-{host.index}").start()
        wait_until(lambda: self.supervisor_hosts() == {h.address for h in self.sup_hosts}, 60,
                   "both supervisors registered with their hosts' addresses")

    def host_conf(self, host: Any, role: str) -> dict[str, Any]:
        return host.conf(self.conf, **{"storm.local.dir": str(self.base / host.namespace / role / "local"),
                                       "storm.log.dir": str(self.base / host.namespace / role / "logs"),
                                       "dev.zookeeper.path": str(self.base / host.namespace / "zookeeper"),
                                       "logviewer.port": 8000})

    def supervisor_hosts(self) -> set[str]:
        with connect(self.conf) as client:
            return {s.host for s in client.getClusterInfo().supervisors}

    def submit_wordcount(self, name: str, out: Path, total: int, **extra: Any) -> str:
        args = ["submit", str(TOPOLOGIES / "wordcount.py"), "--name", name, "--workers", "2"]
        for key, value in run_conf(out, total, **extra).items():
            args += ["-c", f"{key}={json.dumps(value)}"]
        cli(self.conf, self.base, *args)
        with connect(self.conf) as client:
            return next(t.id for t in client.getClusterInfo().topologies if t.name == name)


def run_on_hosts(tmp_path: Path, count: int, nimbus_hosts: list[int], body: Any) -> None:
    """Build ``count`` hosts, run ``body(cluster)``, and check that nothing is left behind."""
    net = HostNetwork(count)
    prefix = net.prefix
    try:
        net.create()
        body(HostCluster(net, tmp_path, nimbus_hosts))
    finally:
        net.close()
    assert leftovers(prefix) == [], "the harness removes every namespace and link it made"
    assert all(not namespace_pids(f"{prefix}h{i}") for i in range(count))


def test_three_nimbus_hosts_sigkill_leader_during_wordcount(tmp_path: Path) -> None:
    """Issue 11's acceptance: three Nimbus daemons on three hosts; SIGKILL the leader while a word
    count runs; within 30 s `stormpy list` (all three in nimbus.seeds) answers from the new
    leader, a new topology can be submitted, and the running one never stops acking."""
    def body(cluster: HostCluster) -> None:
        out = tmp_path / "out"
        out.mkdir()
        topology_id = cluster.submit_wordcount("ha-wc", out, 10_000_000, **{"test.spout.per.call": 1})
        wait_until(lambda: len(acked_ids(out)) >= 200, 120, "the first 200 acks")
        old = cluster.leader
        standbys = [p for hp, p in cluster.nimbuses.items() if f"{hp}:{NIMBUS_PORT}" != old]
        wait_until(lambda: all(holds_code(p, topology_id) for p in standbys), 30,
                   "both standbys to hold the complete code")
        cluster.nimbuses[old.rpartition(":")[0]].kill(signal.SIGKILL)
        acks_at_kill = len(acked_ids(out))
        killed_at = time.monotonic()
        new = wait_for_leader(cluster.conf, 30, other_than=old)
        assert len(acked_ids(out)) > acks_at_kill, "acks went on while no Nimbus led"
        listed = wait_until(lambda: _try_list(cluster), 30 - (time.monotonic() - killed_at),
                            "`stormpy list` to answer from the new leader")
        print(f"failover across hosts: {new} leads, list answers {time.monotonic() - killed_at:.1f}s after SIGKILL")
        assert "ha-wc" in listed
        out2 = tmp_path / "out2"
        out2.mkdir()
        cluster.submit_wordcount("after-failover", out2, 300)
        wait_until(lambda: len(acked_ids(out2)) == 300, 120, "every tuple of the topology submitted after failover")
        wait_until(lambda: counts(out2) == expected_counts(300), 30, "its exact word counts, counted across the hosts")
        wait_until(lambda: len(acked_ids(out)) > acks_at_kill + 200, 60, "the running word count to keep acking")

    run_on_hosts(tmp_path, 3, [0, 1, 2], body)


def holds_code(nimbus: Any, topology_id: str) -> bool:
    """The Nimbus holds the complete code of ``topology_id`` (``NimbusFiles.has_code``): a copy is
    renamed into ``stormdist/<id>`` once complete; during it only a ``.tmp-*`` directory exists,
    which an "any entry in stormdist" check took for the code (the leader's host was then cut off
    in the middle of the standby's copy)."""
    return (Path(nimbus.conf["storm.local.dir"]) / "nimbus" / "stormdist" / topology_id / CONF_FILE).is_file()


def _try_list(cluster: HostCluster) -> str | None:
    try:
        return cli(cluster.conf, cluster.base, "list").stdout
    except AssertionError:
        return None


def worker_slots(host: Any) -> dict[int, tuple[str, str, int]]:
    """pid -> (topology id, supervisor id, port) of every stormpy worker process inside ``host``."""
    found = {}
    for pid in namespace_pids(host.namespace):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if "stormpy.worker" in args:
            topology_id, supervisor_id, port = args[args.index("stormpy.worker") + 1:][:3]
            found[pid] = (topology_id, supervisor_id, int(port))
    return found


@pytest.mark.slow
def test_supervisor_host_link_cut_mid_run(tmp_path: Path) -> None:
    """Issue 11 item 4: cut one supervisor host's link while a word count runs on both. Its ZooKeeper
    session ends, Nimbus moves its executors to the other host (nimbus.supervisor.timeout.secs,
    nimbus.task.timeout.secs) and every tuple is acked. When the link comes back the returning
    supervisor kills its stale workers: afterwards exactly one worker runs per assigned slot."""
    def body(cluster: HostCluster) -> None:
        cut, other = cluster.sup_hosts
        with connect(cluster.conf) as client:
            sup_ids = {s.host: s.supervisor_id for s in client.getClusterInfo().supervisors}
        out = tmp_path / "out"
        out.mkdir()
        total = 8000
        topology_id = cluster.submit_wordcount("cut-wc", out, total, **{"test.spout.per.call": 1,
                                                                          "test.spout.sleep.ms": 3})
        wait_until(lambda: {e.host for e in _executors(cluster, topology_id)} == {cut.address, other.address}, 60,
                   "executors on both supervisor hosts")
        wait_until(lambda: len(acked_ids(out)) >= 100, 120, "the first 100 acks")
        # Every daemon binds and advertises its own host's address, never 127.0.0.1 (item 3; this
        # word count across two supervisor hosts is also the plain multi-host run).
        for host in cluster.sup_hosts:
            bound = {addr for port in WORKER_PORTS for addr in listening(host, port)}
            assert bound == {host.address}, f"workers on {host} bind its address only, not {bound}"
        stale = worker_slots(cut)
        assert stale and all(sup == sup_ids[cut.address] for _t, sup, _p in stale.values()), stale
        cut.set_link(False)
        cut_at = time.monotonic()
        acked_at_cut = len(acked_ids(out))
        assert acked_at_cut < total, "the cut must come mid-run"
        try:
            wait_until(lambda: {e.host for e in _executors(cluster, topology_id)} == {other.address}, 60,
                       "Nimbus to move every executor to the host still connected")
            print(f"executors moved {time.monotonic() - cut_at:.1f}s after the cut")
            wait_until(lambda: len(acked_ids(out)) == total, 200,
                       f"all {total} sentences acked with one supervisor host cut off")
            print(f"link cut with {acked_at_cut}/{total} acked; all acked {time.monotonic() - cut_at:.1f}s later")
            assert set(worker_slots(cut)) == set(stale), "cut off, the supervisor cannot know: its workers run on"
        finally:
            cut.set_link(True)
        wait_until(lambda: cluster.supervisor_hosts() == {cut.address, other.address}, 60,
                   "the returning supervisor to register again")
        wait_until(lambda: not set(stale) & set(worker_slots(cut)), 60,
                   "the returning supervisor to kill its stale workers")
        print(f"stale workers {sorted(stale)} killed after the link came back")

        def one_worker_per_assigned_slot() -> bool:
            assigned = {(sup_ids[e.host], e.port) for e in _executors(cluster, topology_id)}
            running = [(sup, port) for host in cluster.sup_hosts for _t, sup, port in worker_slots(host).values()]
            return sorted(running) == sorted(assigned)
        wait_until(one_worker_per_assigned_slot, 30, "exactly one worker per assigned slot, none elsewhere")
        time.sleep(3)       # a few supervisor/monitor rounds later it still holds: nothing came back to life
        assert one_worker_per_assigned_slot()
        assert {e.host for e in _executors(cluster, topology_id)} == {other.address}, \
            "balanced workers stay where they are when the host returns"
        assert len(acked_ids(out)) == total
        nimbus_host = cluster.nimbus_hosts[0]
        assert cluster.leader == f"{nimbus_host.address}:{NIMBUS_PORT}", "Nimbus advertises its host's address"
        assert listening(nimbus_host, NIMBUS_PORT) == [nimbus_host.address], "Nimbus binds its host's address"
        assert "cut-wc" in cli(cluster.conf, tmp_path, "list").stdout

    run_on_hosts(tmp_path, 3, [0], body)


def _executors(cluster: HostCluster, topology_id: str) -> list[Any]:
    with connect(cluster.conf) as client:
        return list(client.getTopologyInfo(topology_id).executors)


@pytest.mark.slow
def test_nimbus_leader_host_link_cut(tmp_path: Path) -> None:
    """Issue 11 item 4: the host of the leader Nimbus (not ZooKeeper's) is cut off the network while a
    word count runs: its session expires, the standby leads, the word count keeps acking and a new
    topology can be submitted; when the link comes back the old leader is a standby."""
    def body(cluster: HostCluster) -> None:
        leader_host = cluster.nimbus_hosts[0]
        old = f"{leader_host.address}:{NIMBUS_PORT}"
        assert cluster.leader == old
        standby = cluster.nimbuses[cluster.nimbus_hosts[1].address]
        out = tmp_path / "out"
        out.mkdir()
        topology_id = cluster.submit_wordcount("leader-cut-wc", out, 10_000_000, **{"test.spout.per.call": 1})
        wait_until(lambda: len(acked_ids(out)) >= 200, 120, "the first 200 acks")
        wait_until(lambda: holds_code(standby, topology_id), 30, "the standby to hold the complete code")
        leader_host.set_link(False)
        try:
            acks_at_cut = len(acked_ids(out))
            new = wait_for_leader(cluster.conf, 30, other_than=old)
            assert new == f"{cluster.nimbus_hosts[1].address}:{NIMBUS_PORT}"
            standby_first = {**cluster.conf, "nimbus.seeds": list(reversed(cluster.conf["nimbus.seeds"]))}
            out2 = tmp_path / "out2"
            out2.mkdir()
            args = ["submit", str(TOPOLOGIES / "wordcount.py"), "--name", "after-cut", "--workers", "2"]
            for key, value in run_conf(out2, 300).items():
                args += ["-c", f"{key}={json.dumps(value)}"]
            cli(standby_first, cluster.base, *args)
            wait_until(lambda: len(acked_ids(out2)) == 300, 120, "every tuple of the topology submitted after the cut")
            assert len(acked_ids(out)) > acks_at_cut + 200, "the running word count kept acking"
        finally:
            leader_host.set_link(True)
        wait_until(lambda: _is_standby(cluster, leader_host.address), 60,
                   "the old leader, back on the network, to serve as a standby")
        assert wait_for_leader(cluster.conf, 10) == new

    run_on_hosts(tmp_path, 4, [3, 0], body)


def shape_thrift_replies(host: Any, to_address: str, rate: str) -> None:
    """Slow the Nimbus Thrift replies ``host`` sends to ``to_address`` down to ``rate`` (an htb
    class matched on source port and destination), so a standby's code copy from it lasts
    seconds; everything else it sends (ZooKeeper, supervisors, clients) is not slowed."""
    for argv in (["qdisc", "add", "dev", host.veth_inside, "root", "handle", "1:", "htb", "default", "10"],
                 ["class", "add", "dev", host.veth_inside, "parent", "1:", "classid", "1:10", "htb",
                  "rate", "10gbit"],
                 ["class", "add", "dev", host.veth_inside, "parent", "1:", "classid", "1:20", "htb",
                  "rate", rate, "ceil", rate, "burst", "1600"],
                 ["filter", "add", "dev", host.veth_inside, "parent", "1:", "protocol", "ip", "u32",
                  "match", "ip", "dst", f"{to_address}/32", "match", "ip", "sport", str(NIMBUS_PORT), "0xffff",
                  "flowid", "1:20"]):
        result = host.run("tc", *argv)
        if result.returncode != 0:
            pytest.skip(f"cannot shape traffic with tc (htb, u32) here: {result.stderr.strip()}")


@pytest.mark.slow
def test_nimbus_leader_host_cut_mid_code_copy(tmp_path: Path) -> None:
    """The leader's host is cut off while the standby is copying a new topology's code from it:
    the copy must not hold the standby for the calls' 60 s. It gives up within the ZooKeeper
    session timeout, and once the old leader's session has ended the standby, the only Nimbus
    left, leads without that code within 30 s, keeping the topology (its code comes back from
    the supervisors, DESIGN section 14)."""
    def body(cluster: HostCluster) -> None:
        leader_host, standby_host = cluster.nimbus_hosts
        old = f"{leader_host.address}:{NIMBUS_PORT}"
        assert cluster.leader == old
        standby = cluster.nimbuses[standby_host.address]
        shape_thrift_replies(leader_host, standby_host.address, "8kbit")
        out = tmp_path / "out"
        out.mkdir()
        topology_id = cluster.submit_wordcount("cut-mid-copy", out, 10_000_000, **{"test.spout.per.call": 1})
        stormdist = Path(standby.conf["storm.local.dir"]) / "nimbus" / "stormdist"
        wait_until(lambda: any(p.name.startswith(f".tmp-{topology_id}-") for p in stormdist.iterdir()), 30,
                   "the standby to start copying the code")
        leader_host.set_link(False)
        cut_at = time.monotonic()
        try:
            assert not holds_code(standby, topology_id), "the cut must come in the middle of the copy"
            new = wait_for_leader(cluster.conf, 30, other_than=old)
            print(f"the standby leads {time.monotonic() - cut_at:.1f}s after the cut in the middle of its copy")
            assert new == f"{standby_host.address}:{NIMBUS_PORT}"
            standby_first = {**cluster.conf, "nimbus.seeds": list(reversed(cluster.conf["nimbus.seeds"]))}
            assert "cut-mid-copy" in cli(standby_first, cluster.base, "list").stdout, "the topology is kept"
        finally:
            leader_host.set_link(True)

    run_on_hosts(tmp_path, 4, [3, 0], body)


def _is_standby(cluster: HostCluster, address: str) -> bool:
    try:
        client = open_client(address, NIMBUS_PORT, 5)
    except Exception:  # noqa: BLE001 - not reachable yet
        return False
    try:
        return not any(n.isLeader for n in client.getClusterInfo().nimbuses if n.host == address)
    finally:
        client.close()
