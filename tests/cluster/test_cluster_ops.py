"""Operating a real cluster (issue 12): ``stormpy errors`` / ``logs``, ``/metrics``, the graph API,
the UI pages in a real headless Chromium, rebalance shown in the config, the kill button, and
log retention after the kill.

One process cluster (ZooKeeper, Nimbus, 2 supervisors x 2 ports, UI) and one word count whose
count bolt raises on every 1000th tuple serve the whole module; the tests run in file order and
the last one kills the topology through the UI. Browser tests use Debian's ``chromium`` driven by
Playwright (``executable_path``, no downloaded browser); without either they are skipped with
the reason.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from process_cluster import REPO, ProcessCluster
from stormpy.testing import wait_until

pytestmark = pytest.mark.timeout(300)

CLUSTER_SUPERVISORS = 2
CLUSTER_PORTS = 2
CLUSTER_CONF = {"logviewer.cleanup.interval.secs": 1, "logviewer.cleanup.age.mins": 0}


# Read at import: the autouse fixture in tests/conftest.py removes every STORMPY_* variable
# before each test runs.
_SCREENSHOT_DIR = os.environ.get("STORMPY_SCREENSHOT_DIR")


def screenshot(tmp_path: Path, name: str) -> Path:
    """Where a browser test saves its picture: STORMPY_SCREENSHOT_DIR when a human wants to look
    (docs/_static/screenshots/ refreshes the site's pictures), else the test's own temporary
    directory (a CI run leaves nothing in /tmp)."""
    return Path(_SCREENSHOT_DIR or tmp_path) / name


@pytest.fixture(scope="module")
def ops(process_cluster: ProcessCluster) -> Iterator[dict[str, str]]:
    name = f"opswc-{uuid.uuid4().hex[:6]}"
    topology_id = process_cluster.submit("ops_wordcount.py", name, workers=2, conf={})
    try:
        process_cluster.wait_workers(topology_id, 2)
        yield {"name": name, "id": topology_id}
    finally:
        if process_cluster.topology_id(name) is not None:
            process_cluster.kill_topology(name, wait_secs=0)


def run_cli(cluster: ProcessCluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``stormpy <args>`` with the cluster's client config, not raising on failure."""
    conf_file = cluster.log_dir / "client.yaml"
    conf_file.write_text(json.dumps({k: cluster.conf[k] for k in (
        "storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root", "nimbus.seeds",
        "nimbus.thrift.port")}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "stormpy.cli", *args, "--config", str(conf_file)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=str(cluster.base))


def ui_url(cluster: ProcessCluster, path: str) -> str:
    return f"http://127.0.0.1:{cluster.conf['ui.port']}{path}"


def http_get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.status, resp.read().decode()


def worker_logs(cluster: ProcessCluster, topology_id: str) -> dict[int, Path]:
    found = {}
    for path in cluster.base.glob(f"supervisor-*/logs/workers-artifacts/{topology_id}/*/worker.log"):
        found[int(path.parent.name)] = path
    return found


# ---------------------------------------------------------------- errors and logs

def test_errors_shows_the_count_bolts_errors_with_time_host_port(cluster, ops):
    wait_until(lambda: (cluster.topology_info(ops["id"]).errors or {}).get("count"), 90,
               "an error of the count bolt in getTopologyInfo")
    out = cluster.cli("errors", ops["name"]).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["COMPONENT", "TIME", "(UTC)", "HOST", "PORT", "ERROR"]
    count_lines = [line for line in lines[2:] if line.startswith("count ")]
    assert count_lines and all("ValueError: count-boom at tuple 1000 of task" in line for line in count_lines), out
    ports = {e.port for e in cluster.topology_info(ops["id"]).executors if e.component_id == "count"}
    assert all(any(f" 127.0.0.1  {p} " in line for p in ports) for line in count_lines), out
    assert "No errors in topology" in cluster.cli("errors", ops["name"], "--component", "split").stdout
    bad = run_cli(cluster, "errors", ops["name"], "--component", "nope")
    assert bad.returncode == 1
    assert bad.stderr.strip().endswith(f"topology {ops['name']!r} has no component 'nope' "
                                       "(components: count, sentences, split)"), bad.stderr


def test_logs_prints_the_last_lines_of_the_count_workers_logs(cluster, ops):
    ports = sorted({e.port for e in cluster.topology_info(ops["id"]).executors if e.component_id == "count"})
    wait_until(lambda: all(p in worker_logs(cluster, ops["id"]) and "has seen" in worker_logs(cluster, ops["id"])[p]
                           .read_text() for p in ports), 90, "'has seen' lines in the count workers' logs")
    out = cluster.cli("logs", ops["name"], "--component", "count", "-n", "20").stdout.splitlines()
    files = worker_logs(cluster, ops["id"])
    if len(ports) > 1:
        headers = [i for i, line in enumerate(out) if line.startswith("==> ")]
        assert [out[i] for i in headers] == [f"==> 127.0.0.1:{p} {ops['id']}/{p}/worker.log <==" for p in ports]
        blocks = [out[i + 1:j] for i, j in zip(headers, headers[1:] + [len(out)])]
    else:
        blocks = [out]
    for port, block in zip(ports, blocks):
        assert len(block) == 20, block
        text = files[port].read_text()
        assert all(line in text for line in block), (port, block)
    bad = run_cli(cluster, "logs", "no-such-topology")
    assert bad.returncode == 1 and "no-such-topology" in bad.stderr


def test_logs_follow_prints_new_lines_until_interrupted(cluster, ops):
    conf_file = cluster.log_dir / "client.yaml"
    proc = subprocess.Popen([sys.executable, "-m", "stormpy.cli", "logs", ops["name"], "--component", "count",
                             "-f", "-n", "0", "--config", str(conf_file)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=str(cluster.base))
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(lambda: any("has seen" in line for line in seen), 60, "a new 'has seen' line from logs -f")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        reader.join(5)


# ---------------------------------------------------------------- metrics and graph API

def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_parse_and_per_component_counters_increase(cluster, ops):
    def component(samples: dict, metric: str, comp: str, kind: str) -> float:
        return samples[(metric, tuple(sorted({"topology": ops["name"], "topology_id": ops["id"], "component": comp,
                                               "type": kind}.items())))]

    status, text = http_get(ui_url(cluster, "/metrics"))
    first = _samples(text)
    assert first[("storm_cluster_supervisors", ())] == 2
    assert first[("storm_cluster_slots_total", ())] == 4
    for metric in ("storm_component_emitted_total", "storm_component_acked_total", "storm_component_failed_total",
                   "storm_component_transferred_total", "storm_component_capacity", "storm_component_executed_total"):
        component(first, metric, "split", "bolt")
    component(first, "storm_component_complete_latency_ms", "sentences", "spout")
    assert ("storm_worker_emitted_total", tuple(sorted({"topology": ops["name"], "topology_id": ops["id"],
                                                        "host": "127.0.0.1", "port": str(cluster.topology_info(
                                                            ops["id"]).executors[0].port)}.items()))) in first

    def grew() -> bool:
        now = _samples(http_get(ui_url(cluster, "/metrics"))[1])
        return all(component(now, m, c, k) > component(first, m, c, k) for m, c, k in (
            ("storm_component_emitted_total", "split", "bolt"), ("storm_component_acked_total", "split", "bolt"),
            ("storm_component_emitted_total", "sentences", "spout"),
            ("storm_component_acked_total", "sentences", "spout")))
    wait_until(grew, 60, "emitted/acked counters of split and sentences to increase between scrapes")


def test_visualization_api_has_storms_shape(cluster, ops):
    doc = json.loads(http_get(ui_url(cluster, f"/api/v1/topology/{ops['id']}/visualization"))[1])
    assert sorted(doc) == ["count", "sentences", "split"]
    assert doc["sentences"][":type"] == "spout" and doc["count"][":type"] == "bolt"
    assert [(i[":component"], i[":stream"], i[":grouping"]) for i in doc["split"][":inputs"]] == \
        [("sentences", "default", "shuffle")]
    assert [(i[":component"], i[":grouping"]) for i in doc["count"][":inputs"]] == [("split", "fields")]
    assert doc["sentences"][":stats"] and {":host", ":port", ":uptime_secs", ":transferred"} <= set(
        doc["sentences"][":stats"][0])
    # the workers publish their receive queues, so backpressure comes from them, not from capacity
    for component in ("sentences", "split", "count"):
        assert doc[component][":backpressure-source"] == "receive-queue", doc[component]
        assert isinstance(doc[component][":backpressure"], bool) and doc[component][":receive-pct-full"] >= 0


def test_timeseries_api_shows_moving_rates(cluster, ops):
    def series(path: str) -> dict[str, Any]:
        return json.loads(http_get(ui_url(cluster, f"/api/v1/topology/{ops['id']}{path}/timeseries"))[1])

    wait_until(lambda: sum(series("")["emitted"][-3:]) > 0, 60, "a positive emitted/s in the topology's time series")
    doc = series("")
    assert doc["samples"] >= 2 and len(doc["time"]) == doc["samples"] - 1 and doc["latencyKind"] == "complete"
    wait_until(lambda: sum(series("/component/split")["acked"][-3:]) > 0, 60, "split's acked/s in its time series")
    assert series("/component/split")["type"] == "bolt"


def test_rebalance_is_shown_in_the_topology_config(cluster, ops):
    def conf_workers() -> Any:
        return json.loads(http_get(ui_url(cluster, f"/api/v1/topology/{ops['id']}"))[1])["configuration"].get(
            "topology.workers")
    assert conf_workers() == 2
    cluster.cli("rebalance", ops["name"], "-w", "0", "-n", "1")
    wait_until(lambda: conf_workers() == 1, 60, "topology.workers 1 in the UI's config after rebalance -n 1")
    cluster.wait_workers(ops["id"], 1, timeout=90)


# ---------------------------------------------------------------- a real browser

def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    tab = context.new_page()
    tab.console_errors = []
    tab.on("console", lambda msg: tab.console_errors.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: tab.console_errors.append(str(exc)))
    try:
        yield tab
    finally:
        context.close()


def test_browser_cluster_and_topology_pages(cluster, ops, page, tmp_path):
    page.goto(ui_url(cluster, "/"))
    assert ops["name"] in page.inner_text("main")
    page.click(f"text={ops['name']}")
    page.wait_for_url("**/topology.html?id=*")
    text = page.inner_text("main")
    for component in ("sentences", "split", "count"):
        assert component in text
    assert page.locator("a", has_text="Show the topology graph").count() == 1
    # the last hour's charts: a drawn line (two points at least) in each of the four sparklines
    page.wait_for_function("() => { const f = [...document.querySelectorAll('div.charts figure')];"
                           " return f.length === 4 && f.every(e => { const s = e.querySelector('svg.sparkline');"
                           " return s.querySelector('path') && Number(s.dataset.points) >= 2; }); }",
                           timeout=45000)
    assert "samples over the last 60 min" in page.inner_text("p.charts-status")
    page.locator("div.charts").screenshot(path=str(screenshot(tmp_path, "stormpy-topology-charts.png")))
    assert page.console_errors == []


def test_browser_component_page(cluster, ops, page):
    page.goto(ui_url(cluster, f"/component.html?topology_id={ops['id']}&id=count"))
    assert "count-boom" in page.inner_text("main")
    page.wait_for_selector("figure[data-series='emitted'] svg.sparkline path", timeout=45000)
    assert "Process latency (ms)" in page.inner_text("div.charts")
    assert page.console_errors == []


def test_browser_graph_page_shows_every_component_and_stream(cluster, ops, page, tmp_path):
    page.goto(ui_url(cluster, f"/topology.html?id={ops['id']}"))
    page.click("text=Show the topology graph")
    page.wait_for_selector("g.node[data-component='count']", timeout=30000)
    nodes = sorted(page.eval_on_selector_all("g.node", "els => els.map(e => e.dataset.component)"))
    assert nodes == ["count", "sentences", "split"]
    edges = sorted(page.eval_on_selector_all("g.edge", "els => els.map(e => e.dataset.source + '>' + e.dataset.target)"))
    assert edges == ["sentences>split", "split>count"]
    page.wait_for_function("() => [...document.querySelectorAll('g.edge text')].every("
                           "t => /[0-9.]+ tuples\\/s/.test(t.textContent))", timeout=30000)
    shot = screenshot(tmp_path, "stormpy-topology-graph.png")
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 5000
    assert page.console_errors == []


def test_browser_kill_button_kills_and_worker_logs_are_cleaned_up(cluster, ops, page):
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(ui_url(cluster, f"/topology.html?id={ops['id']}"))
    kill = page.locator("form[data-action='kill']")
    kill.locator("input[name='wait']").fill("0")
    kill.locator("button").click()
    page.wait_for_selector("#action-result:has-text('kill')", timeout=30000)
    wait_until(lambda: cluster.topology_id(ops["name"]) is None, 60, f"{ops['name']} to be gone after the kill button")
    assert page.console_errors == []
    wait_until(lambda: not cluster.worker_pids(ops["id"]), 60, "the killed topology's workers to exit")
    # logviewer.cleanup.age.mins=0: the supervisors delete the dead topology's worker logs
    wait_until(lambda: not list(cluster.base.glob(f"supervisor-*/logs/workers-artifacts/{ops['id']}")), 60,
               "the killed topology's worker log directories to be deleted")
