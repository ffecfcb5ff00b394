"""Nimbus's size limits on submitted topologies (issue 10, items 5 and 7), against a real
Nimbus process and ZooKeeper: each refusal is a clear InvalidTopologyException before anything
is written, and a submit that fails after its code was stored leaves nothing on disk."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nimbus_helpers import bolt, client_for, code_zip, shuffle, simple_topology, spout, upload
from stormpy.cluster_state import ClusterState
from stormpy.testing import DaemonProcess, free_port
from stormpy.thrift import storm


@pytest.fixture(scope="module")
def limits_conf(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("nimbus-limits")
    return {**zookeeper.client_conf(f"/m/nimbus-limits-{uuid.uuid4().hex[:8]}"),
            "storm.zookeeper.session.timeout": 4000, "storm.local.dir": str(base / "storm-local"),
            "storm.log.dir": str(base / "logs"), "storm.local.hostname": "127.0.0.1",
            "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": free_port(),
            "nimbus.thrift.max_buffer_size": 8 * 1048576,
            "nimbus.executors.perTopology": 50, "nimbus.slots.perTopology": 4,
            "nimbus.topology.conf.max.bytes": 64 * 1024}


@pytest.fixture(scope="module")
def nimbus(limits_conf: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess("nimbus", limits_conf, tmp_path_factory.mktemp("nimbus-limits-logs"))
    daemon.start()
    try:
        daemon.wait_for_port(limits_conf["nimbus.thrift.port"], timeout=60)
        yield daemon
    finally:
        daemon.stop(reason="module finished")


def _deep(levels: int) -> str:
    return '{"k": ' * levels + "1" + "}" * levels


CASES = [
    ("par=100000", simple_topology(spout_par=100000), {}, "nimbus.executors.perTopology"),
    ("many tasks", simple_topology(spout_par=1, bolt_par=1, bolt_tasks=1000), {}, "tasks; the limit is 500"),
    ("ackers", simple_topology(spout_par=10), {"topology.acker.executors": 45}, "ackers"),
    ("workers", simple_topology(), {"topology.workers": 5}, "nimbus.slots.perTopology"),
    ("deep conf", simple_topology(), _deep(1000), "nested"),
    ("deep conf below recursion", simple_topology(), _deep(40), "nested 40 levels deep"),
    ("big conf", simple_topology(), {"blob": "x" * 200_000}, "nimbus.topology.conf.max.bytes"),
    ("deep component conf", storm.StormTopology(spouts={"spout": spout(1, json_conf=_deep(500))}, bolts={},
                                                state_spouts={}), {}, "config of component 'spout'"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_oversized_topologies_are_refused_before_anything_is_written(
        nimbus: DaemonProcess, limits_conf: dict[str, Any], case: tuple[str, Any, Any, str]) -> None:
    _id, topology, conf, match = case
    client = client_for(limits_conf)
    try:
        location = upload(client, code_zip())
        json_conf = conf if isinstance(conf, str) else json.dumps(conf)
        with pytest.raises(storm.InvalidTopologyException) as info:
            client.submitTopology("big", location, json_conf, topology)
        assert match in info.value.msg
        assert client.getClusterInfo().topologies == []   # Nimbus answers at once afterwards
    finally:
        client.close()
    stormdist = Path(limits_conf["storm.local.dir"]) / "nimbus" / "stormdist"
    assert not stormdist.exists() or list(stormdist.iterdir()) == []


def test_rebalance_beyond_the_limits_is_refused(nimbus: DaemonProcess, limits_conf: dict[str, Any]) -> None:
    topology = storm.StormTopology(spouts={"spout": spout(1)}, state_spouts={}, bolts={
        "b": bolt(1, {("spout", "default"): shuffle()}, json_conf=json.dumps({"topology.tasks": 400}))})
    client = client_for(limits_conf)
    try:
        client.submitTopology("reb", upload(client, code_zip()), "{}", topology)
        with pytest.raises(storm.InvalidTopologyException, match="nimbus.executors.perTopology"):
            client.rebalance("reb", storm.RebalanceOptions(wait_secs=0, num_executors={"b": 300}))
        with pytest.raises(storm.InvalidTopologyException, match="nimbus.slots.perTopology"):
            client.rebalance("reb", storm.RebalanceOptions(wait_secs=0, num_workers=9))
        client.killTopologyWithOpts("reb", storm.KillOptions(wait_secs=0))
    finally:
        client.close()


def test_a_submit_failing_after_its_code_was_stored_leaves_nothing(zk_conf: dict[str, Any], tmp_path: Path) -> None:
    """ZooKeeper refusing the StormBase write (as it refused a 6.6 MB assignment) after the
    stormdist directory was written: the directory and the ZooKeeper nodes are removed."""
    from stormpy.nimbus.core import Nimbus
    from stormpy.nimbus.files import NimbusFiles

    conf = {**zk_conf, "storm.local.dir": str(tmp_path / "local")}
    state = ClusterState(conf)
    files = NimbusFiles(tmp_path / "local", max_upload_bytes=1 << 20, stream_expiration_secs=30)
    try:
        from stormpy.config import Config

        nimbus = Nimbus(Config(conf), state, files, lambda *a, **k: None)
        location = files.begin_upload()
        files.upload_chunk(location, code_zip())
        files.finish_upload(location)

        def refused(*_args: Any) -> None:
            raise RuntimeError("ZooKeeper refused the write (injected fault)")
        state.set_storm_base = refused   # the write after stormdist and the assignment
        with pytest.raises(RuntimeError, match="injected"):
            nimbus.submit("orphan", location, "{}", simple_topology())
        assert files.stormdist_ids() == []
        assert state.assignments() == {} and state.active_storms() == []
    finally:
        state.close()
