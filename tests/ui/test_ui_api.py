"""Pure tests of the UI's JSON documents and pages, built from hand-made Nimbus structs."""
from __future__ import annotations

import json

import pytest
from ui_structs import NOW, TOPOLOGY_ID, bolt_executor, cluster_info, storm_topology, topology_info

from stormpy.thrift import storm
from stormpy.ui import api, pages


def test_pretty_uptime_and_window_hints_follow_storm() -> None:
    assert api.pretty_uptime(0) == "0s"
    assert api.pretty_uptime(358) == "5m 58s"
    assert api.pretty_uptime(3725) == "1h 2m 5s"
    assert api.pretty_uptime(90061) == "1d 1h 1m 1s"
    assert api.pretty_uptime(None) == ""
    assert [api.window_hint(w) for w in api.WINDOWS] == ["10m 0s", "3h 0m 0s", "1d 0h 0m 0s", "All time"]


def test_check_window_defaults_to_all_time_and_rejects_unknown() -> None:
    assert api.check_window(None) == ":all-time"
    assert api.check_window("600") == "600"
    with pytest.raises(api.ApiError) as err:
        api.check_window("60")
    assert err.value.status == 400 and "600" in err.value.message


def test_cluster_summary_counts_slots_executors_tasks() -> None:
    doc = api.cluster_summary(cluster_info(), "0.1.0")
    assert doc == {"stormVersion": "0.1.0", "supervisors": 2, "topologies": 2, "slotsTotal": 8, "slotsUsed": 2,
                   "slotsFree": 6, "executorsTotal": 11, "tasksTotal": 13, "nimbusUptime": "1d 1h 1m 1s",
                   "nimbusUptimeSeconds": 90061}


def test_cluster_summary_takes_uptime_and_version_from_leader_nimbus() -> None:
    cs = storm.ClusterSummary(supervisors=[], topologies=[], nimbuses=[
        storm.NimbusSummary(host="n1", port=6627, uptime_secs=42, isLeader=True, version="9.9")])
    doc = api.cluster_summary(cs, "0.1.0")
    assert (doc["nimbusUptimeSeconds"], doc["stormVersion"], doc["slotsTotal"]) == (42, "9.9", 0)


def test_supervisor_nimbus_and_topology_summaries() -> None:
    cs = cluster_info()
    sups = api.supervisor_summary(cs)["supervisors"]
    assert [s["host"] for s in sups] == ["host-a", "host-b"]
    assert sups[0] == {"id": "sup-a", "host": "host-a", "uptime": "1h 1m 40s", "uptimeSeconds": 3700,
                       "slotsTotal": 4, "slotsUsed": 2, "slotsFree": 2}
    nimbuses = api.nimbus_summary(cs, "10.0.0.1", 6627, "0.1.0")["nimbuses"]
    assert nimbuses == [{"host": "10.0.0.1", "port": 6627, "status": "Leader", "version": "0.1.0",
                         "nimbusUpTime": "1d 1h 1m 1s", "nimbusUpTimeSeconds": 90061}]
    topologies = api.topology_summary(cs)["topologies"]
    assert [t["name"] for t in topologies] == ["alpha", "wordcount"]
    assert topologies[1] == {"id": TOPOLOGY_ID, "name": "wordcount", "status": "ACTIVE", "schedulerInfo": "",
                             "uptime": "10m 0s",
                             "uptimeSeconds": 600, "tasksTotal": 10, "workersTotal": 2, "executorsTotal": 8}


def test_topology_page_aggregates_components_for_the_window() -> None:
    doc = api.topology_page(topology_info(), storm_topology(), '{"topology.message.timeout.secs": 30}',
                            ":all-time", NOW)
    assert (doc["id"], doc["name"], doc["status"], doc["uptime"]) == (TOPOLOGY_ID, "wordcount", "ACTIVE", "10m 0s")
    assert (doc["executorsTotal"], doc["workersTotal"], doc["msgTimeout"]) == (5, 2, 30)
    [spout] = doc["spouts"]
    assert spout["spoutId"] == "words" and (spout["executors"], spout["tasks"]) == (2, 4)
    # system streams (__ack_init) are not counted; complete latency weighted by acks: (100*10+300*30)/400
    assert (spout["emitted"], spout["transferred"], spout["acked"], spout["failed"]) == (4000, 4000, 400, 2)
    assert spout["completeLatency"] == "25.000"
    bolts = {b["boltId"]: b for b in doc["bolts"]}
    assert set(bolts) == {"count", "idle"}          # __acker is a system component
    count = bolts["count"]
    assert (count["executors"], count["tasks"], count["executed"], count["acked"], count["failed"]) == (2, 2, 1000, 1000, 2)
    assert (count["processLatency"], count["executeLatency"]) == ("1.600", "0.800")
    assert count["capacity"] == "0.001"             # busiest executor: 600 * 1.0 ms over 500 s of uptime
    assert count["lastError"] == "Traceback ...\nKeyError: 'x'"
    assert (count["errorPort"], count["errorTime"], count["errorLapsedSecs"]) == (6701, NOW - 20, 20)
    idle = bolts["idle"]                            # declared, not running: parallelism from the topology
    assert (idle["executors"], idle["tasks"], idle["emitted"], idle["lastError"]) == (3, 6, 0, "")


def test_topology_stats_has_one_row_per_window_with_spout_acks() -> None:
    doc = api.topology_page(topology_info(), storm_topology(), None, "600", NOW)
    rows = {r["window"]: r for r in doc["topologyStats"]}
    assert list(rows) == ["600", "10800", "86400", ":all-time"]
    assert rows[":all-time"] == {"window": ":all-time", "windowPretty": "All time", "emitted": 4120,
                                 "transferred": 4120, "acked": 400, "failed": 2, "completeLatency": "25.000"}
    assert (rows["600"]["emitted"], rows["600"]["acked"]) == (520, 40)
    assert doc["spouts"][0]["emitted"] == 400        # component rows follow the requested window
    assert doc["windowHint"] == "10m 0s" and doc["configuration"] == {} and doc["msgTimeout"] == 30   # the default


def test_topology_page_with_sys_shows_acker_and_system_streams() -> None:
    doc = api.topology_page(topology_info(), storm_topology(), None, ":all-time", NOW, include_sys=True)
    assert "__acker" in {b["boltId"] for b in doc["bolts"]}
    assert doc["spouts"][0]["emitted"] == 4400


def test_topology_page_lists_workers_errors_and_config() -> None:
    doc = api.topology_page(topology_info(), storm_topology(), '{"a": 1}', ":all-time", NOW)
    assert doc["workers"][0] == {"host": "host-a", "port": 6700, "topologyId": TOPOLOGY_ID,
                                 "topologyName": "wordcount", "executorsTotal": 2,
                                 "componentNumTasks": {"count": 1, "words": 2}, "uptime": "8m 20s",
                                 "uptimeSeconds": 500}
    errors = doc["componentErrors"]
    assert list(errors) == ["count"]
    assert [e["errorLapsedSecs"] for e in errors["count"]] == [20, 300]
    assert doc["configuration"] == {"a": 1}
    assert api.parse_conf("not json") == {"raw": "not json"}


def test_topology_page_shows_worker_thread_errors_of_system_but_not_acker_errors() -> None:
    """Issue 26 item 7: a worker's framework thread failures are __system errors; they are
    shown with the user's components' errors (other framework components' only with sys)."""
    info = topology_info()
    info.errors = {**info.errors,
                   "__system": [storm.ErrorInfo(error="framework thread transfer-send-6700 failed (restarted): "
                                                      "RuntimeError: x", error_time_secs=NOW - 5,
                                                host="host-a", port=6700)],
                   "__acker": [storm.ErrorInfo(error="acker trouble", error_time_secs=NOW - 5, host="host-a", port=6701)]}
    doc = api.topology_page(info, storm_topology(), None, ":all-time", NOW)
    assert list(doc["componentErrors"]) == ["__system", "count"]
    assert "transfer-send-6700" in doc["componentErrors"]["__system"][0]["error"]
    with_sys = api.topology_page(info, storm_topology(), None, ":all-time", NOW, include_sys=True)
    assert list(with_sys["componentErrors"]) == ["__acker", "__system", "count"]


def test_component_page_for_a_spout() -> None:
    doc = api.component_page(topology_info(), storm_topology(), "words", "600", NOW)
    assert (doc["componentType"], doc["executors"], doc["tasks"], doc["topologyId"]) == ("spout", 2, 4, TOPOLOGY_ID)
    assert [s["window"] for s in doc["spoutSummary"]] == list(api.WINDOWS)
    assert doc["spoutSummary"][3]["completeLatency"] == "25.000"
    assert doc["outputStats"] == [{"stream": "default", "emitted": 400, "transferred": 400, "acked": 40,
                                   "failed": 2, "completeLatency": "25.000"}]
    assert [e["id"] for e in doc["executorStats"]] == ["[1-2]", "[3-4]"]
    assert doc["executorStats"][1]["emitted"] == 300 and doc["executorStats"][1]["port"] == 6701
    assert "inputStats" not in doc and doc["componentErrors"] == []


def test_component_page_for_a_bolt_has_inputs_and_errors() -> None:
    doc = api.component_page(topology_info(), storm_topology(), "count", ":all-time", NOW)
    assert doc["componentType"] == "bolt"
    assert doc["inputStats"] == [{"component": "words", "stream": "default", "executed": 1000,
                                  "executeLatency": "0.800", "processLatency": "1.600", "acked": 1000, "failed": 2}]
    assert [e["error"].splitlines()[-1] for e in doc["componentErrors"]] == ["KeyError: 'x'", "ValueError: old"]
    assert [e["capacity"] for e in doc["executorStats"]] == ["0.000", "0.001"]


def test_component_page_unknown_component_is_404() -> None:
    with pytest.raises(api.ApiError) as err:
        api.component_page(topology_info(), storm_topology(), "nope", ":all-time", NOW)
    assert err.value.status == 404 and "nope" in err.value.message


def test_executors_without_stats_count_but_add_nothing() -> None:
    info = topology_info()
    info.executors = [storm.ExecutorSummary(executor_info=storm.ExecutorInfo(task_start=1, task_end=1),
                                            component_id="words", host="h", port=1, uptime_secs=0)]
    doc = api.topology_page(info, None, None, ":all-time", NOW)
    assert [(s["spoutId"], s["executors"], s["emitted"]) for s in doc["spouts"]] == []
    assert [(b["boltId"], b["executors"], b["emitted"]) for b in doc["bolts"]] == [("words", 1, 0)]


def test_kind_comes_from_executor_stats_when_topology_is_missing() -> None:
    doc = api.topology_page(topology_info(), None, None, ":all-time", NOW)
    assert [s["spoutId"] for s in doc["spouts"]] == ["words"]
    assert [b["boltId"] for b in doc["bolts"]] == ["count"]


def test_capacity_uses_window_length_once_uptime_exceeds_it() -> None:
    ex = bolt_executor("count", 1, 1, 1, executed=600_000, process_ms=1.0, execute_ms=1.0, uptime=100_000)
    totals = api.aggregate([ex], "600")
    assert totals.capacity == pytest.approx(1.0)


def test_rebalance_options_from_path_and_body() -> None:
    opts = api.rebalance_options("5", b'{"rebalanceOptions": {"numWorkers": 3, "executors": {"a": "4", "b": 2}}}')
    assert (opts.wait_secs, opts.num_workers, opts.num_executors) == (5, 3, {"a": 4, "b": 2})
    bare = api.rebalance_options("0", b"")
    assert (bare.wait_secs, bare.num_workers, bare.num_executors) == (0, None, None)
    for wait, body in [("-1", b""), ("x", b""), ("1", b"{nope"), ("1", b'{"rebalanceOptions": 3}'),
                       ("1", b'{"rebalanceOptions": {"numWorkers": 0}}'),
                       ("1", b'{"rebalanceOptions": {"executors": {"a": true}}}'),
                       ("1", b'{"rebalanceOptions": {"executors": [1]}}')]:
        with pytest.raises(api.ApiError) as err:
            api.rebalance_options(wait, body)
        assert err.value.status == 400, (wait, body)


def test_kill_options_and_action_result() -> None:
    assert api.kill_options("30").wait_secs == 30
    with pytest.raises(api.ApiError):
        api.kill_options("3.5")
    assert api.action_result("kill", "t-1") == {"topologyOperation": "kill", "topologyId": "t-1", "status": "success"}


def test_pages_escape_user_supplied_names_errors_and_config() -> None:
    evil = '<script>alert("x")</script>'
    info = topology_info(name=evil)
    info.errors["count"][1].error = "boom <img src=x onerror=alert(1)>"
    doc = api.topology_page(info, storm_topology(), json.dumps({"k": evil}), ":all-time", NOW)
    for html in (pages.render_topology(doc),
                 pages.render_index(api.cluster_summary(cluster_info(evil), "v"), None, None,
                                    api.topology_summary(cluster_info(evil))),
                 pages.render_component(api.component_page(info, storm_topology(), "count", "600", NOW)),
                 pages.render_error(404, "Not Found", evil)):
        assert "<script>alert" not in html and "<img src=x" not in html
        assert "&lt;" in html
    topology_html = pages.render_topology(doc)
    assert "/component.html?topology_id=wordcount-1-1000&amp;id=count" in topology_html
    assert 'data-action="kill"' in topology_html


def test_index_page_says_when_nimbus_is_unavailable() -> None:
    html = pages.render_index(None, None, None, None, unavailable="Nimbus is unreachable at h:1")
    assert "Nimbus is unreachable at h:1" in html and "<table" not in html


def test_component_page_shows_the_executors_metrics_such_as_tridents() -> None:
    info = topology_info()
    info.executors[2].stats.metrics = {"trident.txid": 41.0, "trident.batches.committed": 40.0,
                                       "trident.batch.latency.p50.ms": 12.5}
    doc = api.component_page(info, storm_topology(), "count", ":all-time", NOW)
    assert doc["executorStats"][0]["metrics"] == {"trident.batch.latency.p50.ms": 12.5,
                                                  "trident.batches.committed": 40.0, "trident.txid": 41.0}
    assert doc["executorStats"][1]["metrics"] == {}
    html = pages.render_component(doc)
    assert "trident.batches.committed" in html and "12.5" in html and ">41<" in html
