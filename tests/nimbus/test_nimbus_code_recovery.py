"""A leader that lacks a topology's code gets it from another Nimbus that holds it (issue 26 item 3).

Nimbus A leads and takes a submit, then stops; Nimbus B (its own, empty ``storm.local.dir``)
leads alone: it keeps the topology and says CODE MISSING. When A comes back as a standby it
offers the code B asks for under ``/code-requests``, and B keeps it because it matches the
digests recorded at submit. No supervisor is involved.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from nimbus_helpers import call, simple_topology, submit
from stormpy.testing import free_port, wait_for_leader, wait_until


def test_a_standby_that_holds_the_code_gives_it_to_the_leader(daemons: Any, cluster_conf: dict[str, Any],
                                                              tmp_path: Path) -> None:
    port_a, port_b = cluster_conf["nimbus.thrift.port"], free_port()
    seeds = [f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"]
    conf_a = {**cluster_conf, "nimbus.seeds": seeds}
    conf_b = {**conf_a, "nimbus.thrift.port": port_b, "storm.local.dir": str(tmp_path / "b-local")}
    a = daemons.start("nimbus", conf_a, name="nimbus-a", ready_port=port_a)
    wait_for_leader(conf_a, 60)
    topology_id = submit(conf_a, "shared", simple_topology())
    a.stop(reason="A goes away")

    daemons.start("nimbus", conf_b, name="nimbus-b", ready_port=port_b)
    wait_for_leader(conf_b, 60, host_port=f"127.0.0.1:{port_b}")
    [kept] = call(conf_b, "getClusterInfo").topologies
    assert (kept.id, kept.status) == (topology_id, "ACTIVE") and kept.sched_status.startswith("CODE MISSING")

    daemons.start("nimbus", conf_a, name="nimbus-a", ready_port=port_a)      # back, as a standby
    wait_until(lambda: call(conf_b, "getClusterInfo").topologies[0].sched_status is None, 30,
               "B to recover the code from A")
    assert call(conf_b, "getTopology", topology_id) == simple_topology()
    assert (Path(conf_b["storm.local.dir"]) / "nimbus" / "stormdist" / topology_id / "stormcode.zip").is_file()
