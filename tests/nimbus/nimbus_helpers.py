"""Helpers for tests that drive a real Nimbus process: topology structs, uploads, stand-in
supervisors and workers that write SupervisorInfo and heartbeats into the real ZooKeeper."""
from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from collections.abc import Mapping
from typing import Any

from stormpy.client.nimbus_client import open_client
from stormpy.cluster_state import ClusterState
from stormpy.thrift import storm

NULL = storm.NullStruct()


def spout(par: int, fields: tuple[str, ...] = ("word",), json_conf: str | None = None) -> Any:
    common = storm.ComponentCommon(inputs={}, streams={"default": storm.StreamInfo(output_fields=list(fields),
                                                                                 direct=False)},
                                   parallelism_hint=par, json_conf=json_conf)
    return storm.SpoutSpec(spout_object=storm.ComponentObject(python_object=storm.PythonObject(class_name="t:S")),
                           common=common)


def bolt(par: int, inputs: Mapping[tuple[str, str], Any], fields: tuple[str, ...] = ("word", "count"),
         json_conf: str | None = None) -> Any:
    common = storm.ComponentCommon(
        inputs={storm.GlobalStreamId(componentId=c, streamId=s): g for (c, s), g in inputs.items()},
        streams={"default": storm.StreamInfo(output_fields=list(fields), direct=False)},
        parallelism_hint=par, json_conf=json_conf)
    return storm.Bolt(bolt_object=storm.ComponentObject(python_object=storm.PythonObject(class_name="t:B")),
                      common=common)


def shuffle() -> Any:
    return storm.Grouping(shuffle=NULL)


def fields_grouping(*names: str) -> Any:
    return storm.Grouping(fields=list(names))


def simple_topology(spout_par: int = 1, bolt_par: int | None = None, bolt_tasks: int | None = None) -> Any:
    """spout ("spout") -> bolt ("count", fields grouping on "word") when bolt_par is given."""
    bolts = {}
    if bolt_par is not None:
        conf = json.dumps({"topology.tasks": bolt_tasks}) if bolt_tasks else None
        bolts["count"] = bolt(bolt_par, {("spout", "default"): fields_grouping("word")}, json_conf=conf)
    return storm.StormTopology(spouts={"spout": spout(spout_par)}, bolts=bolts, state_spouts={})


def code_zip(files: Mapping[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, text in (files or {"t.py": "# topology\n"}).items():
            # A fixed timestamp: tests compare archives built at different moments byte for byte.
            archive.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), text)
    return buf.getvalue()


def upload(client: Any, data: bytes, chunk: int = 64 * 1024) -> str:
    location = client.beginFileUpload()
    for i in range(0, len(data), chunk):
        client.uploadChunk(location, data[i:i + chunk])
    client.finishFileUpload(location)
    return location


def client_for(conf: Mapping[str, Any]) -> Any:
    return open_client("127.0.0.1", conf["nimbus.thrift.port"], timeout_secs=30)


def submit(conf: Mapping[str, Any], name: str, topology: Any, topo_conf: Mapping[str, Any] | None = None,
           inactive: bool = False) -> str:
    """Upload a small archive and submit; returns the new topology id."""
    client = client_for(conf)
    try:
        location = upload(client, code_zip())
        status = storm.TopologyInitialStatus.INACTIVE if inactive else storm.TopologyInitialStatus.ACTIVE
        client.submitTopologyWithOpts(name, location, json.dumps(dict(topo_conf or {})), topology,
                                      storm.SubmitOptions(initial_status=status))
        return next(t.id for t in client.getClusterInfo().topologies if t.name == name)
    finally:
        client.close()


def call(conf: Mapping[str, Any], method: str, *args: Any) -> Any:
    """One RPC on a fresh connection."""
    client = client_for(conf)
    try:
        return getattr(client, method)(*args)
    finally:
        client.close()


def by_slot(assignment: Any) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """(node, port) -> sorted executors of an Assignment."""
    result: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for info, node_info in (assignment.executor_node_port or {}).items():
        for port in node_info.port:
            result.setdefault((node_info.node, int(port)), []).append((info.task_start, info.task_end))
    return {slot: sorted(execs) for slot, execs in sorted(result.items())}


class FakeSupervisors:
    """Stand-in supervisors: EPHEMERAL SupervisorInfo nodes owned by one test-side session."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.state = ClusterState(conf)

    def add(self, supervisor_id: str, ports: list[int], hostname: str | None = None) -> None:
        self.state.set_supervisor_info(supervisor_id, storm.SupervisorInfo(
            time_secs=int(time.time()), hostname=hostname or f"host-{supervisor_id}", meta=list(ports),
            used_ports=[], uptime_secs=1))

    def remove(self, supervisor_id: str) -> None:
        self.state.remove_supervisor_info(supervisor_id)

    def close(self) -> None:
        self.state.close()


class HeartbeatWriter:
    """Stand-in workers: writes a ClusterWorkerHeartbeat for each live slot every ``interval``.

    ``time_secs`` is a counter, not a clock: Nimbus must judge freshness by when it SEES a
    change, so a fake worker clock is part of what these tests check.
    """

    def __init__(self, state: ClusterState, topology_id: str, interval: float = 0.5) -> None:
        self.state = state
        self.topology_id = topology_id
        self.interval = interval
        self.silenced: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._tick = 0
        self._thread = threading.Thread(target=self._run, name="fake-workers", daemon=True)

    def start(self) -> "HeartbeatWriter":
        self._thread.start()
        return self

    def silence(self, node: str, port: int) -> None:
        self.silenced.add((node, port))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._tick += 1
            assignment = self.state.assignment(self.topology_id)
            if assignment is None:
                continue
            for (node, port), executors in by_slot(assignment).items():
                if (node, port) in self.silenced:
                    continue
                stats = {storm.ExecutorInfo(task_start=s, task_end=e): empty_stats() for s, e in executors}
                self.state.set_worker_heartbeat(self.topology_id, node, port, storm.ClusterWorkerHeartbeat(
                    storm_id=self.topology_id, executor_stats=stats, time_secs=self._tick, uptime_secs=self._tick))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def empty_stats(emitted: int = 0) -> Any:
    return storm.ExecutorStats(emitted={":all-time": {"default": emitted}}, transferred={":all-time": {"default": emitted}},
                               specific=storm.ExecutorSpecificStats(bolt=storm.BoltStats(
                                   acked={}, failed={}, process_ms_avg={})))
