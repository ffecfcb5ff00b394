"""Deployment files users expect (issue 28), checked without Docker or a Kubernetes cluster:
the Dockerfile (a JVM-free variant, an init process, a health check), the Kubernetes manifests
(schema-valid with kubernetes-validate, and running the same daemon commands as the process
cluster), the systemd units (``systemd-analyze verify``), and the health check they all use."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from stormpy.config import load_config
from stormpy.healthcheck import daemon_of
from stormpy.testing import free_port

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
SYSTEMD = REPO / "deploy" / "systemd"
sys.path.insert(0, str(REPO / "tests" / "cluster"))
from process_cluster import DAEMON_COMMANDS  # noqa: E402

HEALTHCHECK = ["python", "-m", "stormpy.healthcheck"]


# ---------------------------------------------------------------- Dockerfile

def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    rows = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            rows.append((word.upper(), rest.strip()))
    return rows


def test_dockerfile_jvm_and_spark_only_with_the_build_argument() -> None:
    rows = dockerfile()
    assert ("ARG", "WITH_SPARK=1") in rows
    runs = [args for word, args in rows if word == "RUN"]
    java = [r for r in runs if "openjdk-17" in r]
    assert len(java) == 1 and 'if [ "$WITH_SPARK" = 1 ]; then apt-get install -y --no-install-recommends openjdk-17' in java[0]
    pip = [r for r in runs if "pip install" in r]
    assert len(pip) == 1
    spark_branch, _, other_branch = pip[0].partition("else")
    assert "[spark" in spark_branch and "spark" not in other_branch and "pip install" in other_branch


def test_dockerfile_has_an_init_process_and_a_health_check() -> None:
    rows = dockerfile()
    assert ("ENTRYPOINT", '["/usr/bin/tini", "--"]') in rows
    assert any(word == "RUN" and "apt-get install" in args and " tini " in args for word, args in rows)
    health = [args for word, args in rows if word == "HEALTHCHECK"]
    assert len(health) == 1 and health[0].endswith('CMD ["python", "-m", "stormpy.healthcheck"]')
    for word, args in rows:
        if word == "COPY":
            assert (REPO / args.split()[0]).exists(), f"COPY source {args.split()[0]} is missing"


def test_dockerfile_copies_what_pip_install_needs(tmp_path: Path) -> None:
    """The image's ``pip install .`` sees only what the Dockerfile copies: the build backend
    (``build_backend/``, named by pyproject.toml) and ``setup.py`` among them. Built here as a
    wheel from exactly those files (no Docker on the test machines)."""
    context = tmp_path / "image"
    for word, args in dockerfile():
        if word != "COPY":
            continue
        *sources, dest = args.split()
        for source in sources:
            target = context / dest / Path(source).name if dest.endswith("/") else context / dest
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO / source, target)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STORMPY_COMPILE")}
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "-w", str(tmp_path / "dist"), str(context)],
                           capture_output=True, text=True, timeout=600, env=env)
    assert built.returncode == 0, built.stderr[-2000:]
    assert list((tmp_path / "dist").glob("stormpy_streams-*-py3-none-any.whl")), built.stdout


# ---------------------------------------------------------------- health check

def test_healthcheck_finds_the_daemon_on_a_command_line() -> None:
    assert daemon_of(["/usr/local/bin/python", "/usr/local/bin/stormpy", "nimbus", "--config", "/etc/s.yaml"]) \
        == ("nimbus", "/etc/s.yaml")
    assert daemon_of(["python", "-m", "stormpy.cli", "supervisor"]) == ("supervisor", None)
    assert daemon_of(["python", "-m", "stormpy.worker", "t-1-1", "s", "6700", "w", "--conf", "f"]) is None
    assert daemon_of(["/usr/bin/tini", "--", "nimbus"]) is None


def test_healthcheck_says_in_one_line_what_does_not_answer(tmp_path: Path) -> None:
    port = free_port()
    conf = tmp_path / "storm.yaml"
    conf.write_text(f"nimbus.thrift.port: {port}\n")
    result = subprocess.run([sys.executable, "-m", "stormpy.healthcheck", "nimbus", "--config", str(conf)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"unhealthy: Nimbus does not answer on 127.0.0.1:{port}")


# ---------------------------------------------------------------- Kubernetes

def manifests() -> dict[str, list[dict[str, Any]]]:
    return {path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
            for path in sorted(K8S.glob("*.yaml"))}


def resources(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for docs in manifests().values() for doc in docs if doc["kind"] == kind}


def test_manifests_are_valid_kubernetes_resources() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (the test extra)")
    checked = 0
    for name, docs in manifests().items():
        for doc in docs:
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
            checked += 1
    assert checked >= 9


def stormpy_containers() -> dict[str, dict[str, Any]]:
    found = {}
    for kind in ("StatefulSet", "Deployment", "DaemonSet"):
        for name, doc in resources(kind).items():
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if container["image"].startswith("stormpy:"):
                    found[name] = {"container": container, "workload": doc}
    return found


def test_manifests_run_zookeeper_nimbus_supervisors_and_the_ui() -> None:
    containers = stormpy_containers()
    assert set(containers) == {"nimbus", "supervisor", "ui"}
    assert "zookeeper" in resources("StatefulSet")
    assert containers["nimbus"]["workload"]["kind"] == "StatefulSet"
    assert containers["supervisor"]["workload"]["kind"] in ("StatefulSet", "DaemonSet")
    config = load_config_from_configmap()
    for name, found in containers.items():
        command = found["container"]["command"]
        assert command[:1 + len(DAEMON_COMMANDS[name])] == ["stormpy", *DAEMON_COMMANDS[name]]
        config_file = command[command.index("--config") + 1]
        mounts = {m["mountPath"]: m["name"] for m in found["container"]["volumeMounts"]}
        assert mounts.get(str(Path(config_file).parent)) == "config"
        probes = [found["container"].get(p) for p in ("readinessProbe", "livenessProbe")]
        assert any(p and p["exec"]["command"] == HEALTHCHECK for p in probes), f"{name}: no health check probe"
    # Nimbus keeps the topologies' code (storm.local.dir) on a volume of its own
    nimbus = containers["nimbus"]
    claims = {c["metadata"]["name"] for c in nimbus["workload"]["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in nimbus["container"]["volumeMounts"]}
    assert mounts[config["storm.local.dir"]] in claims
    # nimbus.seeds names the StatefulSet's pods through its headless service
    replicas = nimbus["workload"]["spec"]["replicas"]
    service = nimbus["workload"]["spec"]["serviceName"]
    assert resources("Service")[service]["spec"]["clusterIP"] == "None"
    assert config["nimbus.seeds"] == [f"nimbus-{i}.{service}" for i in range(replicas)]
    assert config["storm.zookeeper.servers"] == ["zookeeper"] and "zookeeper" in resources("Service")


def load_config_from_configmap() -> Any:
    (config_map,) = resources("ConfigMap").values()
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(config_map["data"]["storm.yaml"])
        f.flush()
        return load_config(f.name)


# ---------------------------------------------------------------- systemd

UNITS = {"nimbus": "stormpy-nimbus.service", "supervisor": "stormpy-supervisor.service", "ui": "stormpy-ui.service"}


def unit_settings(path: Path) -> dict[str, str]:
    settings = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def test_units_run_the_daemons_and_the_supervisor_leaves_its_workers_alive() -> None:
    for daemon, unit in UNITS.items():
        settings = unit_settings(SYSTEMD / unit)
        argv = settings["ExecStart"].split()
        assert Path(argv[0]).name == "stormpy" and argv[1:-2] == DAEMON_COMMANDS[daemon] and argv[-2] == "--config"
        assert settings["Restart"] == "on-failure"
    assert unit_settings(SYSTEMD / UNITS["supervisor"])["KillMode"] == "process"
    assert "KillMode" not in unit_settings(SYSTEMD / UNITS["nimbus"])


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd; .ci/run does)")
    stormpy = shutil.which("stormpy") or shutil.which("stormpy", path=str(Path(sys.executable).parent))
    if stormpy is None:
        pytest.skip("no stormpy executable to stand in for the units' ExecStart")
    for unit in UNITS.values():
        # verify checks that ExecStart exists: point it at this machine's stormpy, nothing else changes
        text = (SYSTEMD / unit).read_text()
        install_path = unit_settings(SYSTEMD / unit)["ExecStart"].split()[0]
        (tmp_path / unit).write_text(text.replace(install_path, stormpy))
    result = subprocess.run([analyze, "verify", *(str(tmp_path / u) for u in UNITS.values())],
                            capture_output=True, text=True, timeout=120)
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if "stormpy-" in line]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr
