"""Hand-built Nimbus structs for the UI tests, and a fake Nimbus client that serves them.

The sample topology "wordcount" (id wordcount-1-1000) has a spout ``words`` (2 executors,
tasks 1-4), a bolt ``count`` (2 executors, tasks 5-6) and the system bolt ``__acker`` (task 7),
spread over two workers. Numbers are chosen so weighted averages are easy to check by hand.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stormpy.thrift import storm

WINDOWS = ("600", "10800", "86400", ":all-time")
TOPOLOGY_ID = "wordcount-1-1000"
NOW = 10_000


def per_window(all_time: dict[Any, Any], last_10m: dict[Any, Any] | None = None) -> dict[str, dict[Any, Any]]:
    """The same numbers in every window, except the 10-minute one when given."""
    result = {w: dict(all_time) for w in WINDOWS}
    if last_10m is not None:
        result["600"] = dict(last_10m)
    return result


def gsid(component: str, stream: str = "default") -> Any:
    return storm.GlobalStreamId(componentId=component, streamId=stream)


def spout_executor(start: int, end: int, port: int, emitted: int, acked: int, latency_ms: float,
                   failed: int = 0, uptime: int = 500) -> Any:
    stats = storm.ExecutorStats(
        emitted=per_window({"default": emitted, "__ack_init": acked}, {"default": emitted // 10}),
        transferred=per_window({"default": emitted, "__ack_init": acked}, {"default": emitted // 10}),
        specific=storm.ExecutorSpecificStats(spout=storm.SpoutStats(
            acked=per_window({"default": acked}, {"default": acked // 10}),
            failed=per_window({"default": failed}),
            complete_ms_avg=per_window({"default": latency_ms}))))
    return storm.ExecutorSummary(executor_info=storm.ExecutorInfo(task_start=start, task_end=end),
                                 component_id="words", host="host-a", port=port, uptime_secs=uptime, stats=stats)


def bolt_executor(component: str, start: int, end: int, port: int, executed: int, process_ms: float,
                  execute_ms: float, emitted: int = 0, uptime: int = 500, source: str = "words") -> Any:
    key = gsid(source)
    stats = storm.ExecutorStats(
        emitted=per_window({"default": emitted, "__ack_ack": executed}),
        transferred=per_window({"default": emitted, "__ack_ack": executed}),
        specific=storm.ExecutorSpecificStats(bolt=storm.BoltStats(
            acked=per_window({key: executed}), failed=per_window({key: 1}),
            process_ms_avg=per_window({key: process_ms}), executed=per_window({key: executed}),
            execute_ms_avg=per_window({key: execute_ms}))))
    return storm.ExecutorSummary(executor_info=storm.ExecutorInfo(task_start=start, task_end=end),
                                 component_id=component, host="host-a", port=port, uptime_secs=uptime, stats=stats)


def topology_info(name: str = "wordcount") -> Any:
    executors = [
        spout_executor(1, 2, 6700, emitted=1000, acked=100, latency_ms=10.0),
        spout_executor(3, 4, 6701, emitted=3000, acked=300, latency_ms=30.0, failed=2),
        bolt_executor("count", 5, 5, 6700, executed=400, process_ms=1.0, execute_ms=0.5, emitted=50),
        bolt_executor("count", 6, 6, 6701, executed=600, process_ms=2.0, execute_ms=1.0, emitted=70),
        bolt_executor("__acker", 7, 7, 6701, executed=10, process_ms=0.1, execute_ms=0.1, source="words"),
    ]
    errors = {"count": [
        storm.ErrorInfo(error="Traceback ...\nValueError: old", error_time_secs=NOW - 300, host="host-a", port=6700),
        storm.ErrorInfo(error="Traceback ...\nKeyError: 'x'", error_time_secs=NOW - 20, host="host-a", port=6701),
    ], "words": []}
    return storm.TopologyInfo(id=TOPOLOGY_ID, name=name, uptime_secs=600, executors=executors, status="ACTIVE",
                              errors=errors)


def storm_topology() -> Any:
    def common(par: int, tasks: int | None = None) -> Any:
        conf = '{"topology.tasks": %d}' % tasks if tasks else None
        return storm.ComponentCommon(inputs={}, streams={}, parallelism_hint=par, json_conf=conf)

    obj = storm.ComponentObject(python_object=storm.PythonObject(class_name="m:C"))
    return storm.StormTopology(
        spouts={"words": storm.SpoutSpec(spout_object=obj, common=common(2, 4))},
        bolts={"count": storm.Bolt(bolt_object=obj, common=common(2)),
               "idle": storm.Bolt(bolt_object=obj, common=common(3, 6))},
        state_spouts={})


def cluster_info(name: str = "wordcount") -> Any:
    return storm.ClusterSummary(
        supervisors=[storm.SupervisorSummary(host="host-b", uptime_secs=70, num_workers=4, num_used_workers=0,
                                             supervisor_id="sup-b"),
                     storm.SupervisorSummary(host="host-a", uptime_secs=3700, num_workers=4, num_used_workers=2,
                                             supervisor_id="sup-a")],
        nimbus_uptime_secs=90061,
        topologies=[storm.TopologySummary(id=TOPOLOGY_ID, name=name, num_tasks=10, num_executors=8, num_workers=2,
                                          uptime_secs=600, status="ACTIVE"),
                    storm.TopologySummary(id="alpha-2-2000", name="alpha", num_tasks=3, num_executors=3,
                                          num_workers=1, uptime_secs=5, status="INACTIVE")])


class FakeNimbus:
    """Answers like Nimbus from the structs above and records the actions it was asked to do."""

    def __init__(self, name: str = "wordcount") -> None:
        self.name = name
        self.calls: list[tuple[Any, ...]] = []

    def _check(self, topology_id: str) -> None:
        if topology_id != TOPOLOGY_ID:
            raise storm.NotAliveException(msg=f"topology {topology_id} is not alive")

    def getClusterInfo(self) -> Any:  # noqa: N802 - Thrift names
        return cluster_info(self.name)

    def getNimbusConf(self) -> str:  # noqa: N802
        return '{"nimbus.thrift.port": 6627}'

    def getTopologyInfo(self, topology_id: str) -> Any:  # noqa: N802
        self._check(topology_id)
        return topology_info(self.name)

    def getTopology(self, topology_id: str) -> Any:  # noqa: N802
        self._check(topology_id)
        return storm_topology()

    def getTopologyConf(self, topology_id: str) -> str:  # noqa: N802
        self._check(topology_id)
        return '{"topology.message.timeout.secs": 30, "topology.workers": 2, "my.key": "<b>hi</b>"}'

    def activate(self, name: str) -> None:
        self.calls.append(("activate", name))

    def deactivate(self, name: str) -> None:
        self.calls.append(("deactivate", name))

    def killTopologyWithOpts(self, name: str, options: Any) -> None:  # noqa: N802
        self.calls.append(("kill", name, options.wait_secs))

    def rebalance(self, name: str, options: Any) -> None:
        if options.num_executors and "nope" in options.num_executors:
            raise storm.InvalidTopologyException(msg="component 'nope' does not exist")
        self.calls.append(("rebalance", name, options.wait_secs, options.num_workers, options.num_executors))


def fake_connect(nimbus: FakeNimbus) -> Any:
    @contextmanager
    def connect(conf: Any) -> Iterator[FakeNimbus]:
        yield nimbus

    return connect


@contextmanager
def refusing_connect(conf: Any) -> Iterator[Any]:
    """What connecting to a stopped Nimbus looks like."""
    raise ConnectionRefusedError(111, "Connection refused")
    yield  # pragma: no cover - makes this a generator
