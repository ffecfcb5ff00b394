"""docker-compose.yml cannot run here (no Docker): check it parses, has the services DESIGN
section 9 lists, and that each runs exactly the stormpy command the process-cluster fixture runs."""
from __future__ import annotations

from pathlib import Path

import yaml

from stormpy.config import load_config
from stormpy.testing import DaemonProcess

from process_cluster import DAEMON_COMMANDS

REPO = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def kind(service: str) -> str:
    return service.rstrip("0123456789")


def stormpy_services() -> dict:
    """The services running stormpy (the optional ``kafka`` broker is not one)."""
    return {name: spec for name, spec in compose()["services"].items() if "command" in spec}


def test_compose_has_the_cluster_services():
    services = stormpy_services()
    assert set(services) == {"zookeeper", "nimbus", "nimbus2", "supervisor1", "supervisor2", "ui"}
    assert sum(1 for s in services if kind(s) == "nimbus") == 2
    assert sum(1 for s in services if kind(s) == "supervisor") == 2


def test_compose_commands_are_the_fixture_commands(tmp_path):
    for service, spec in stormpy_services().items():
        command = spec["command"]
        fixture = DaemonProcess(DAEMON_COMMANDS[kind(service)], {}, tmp_path, name=service)
        argv = fixture.argv()
        # fixture: python -m stormpy.cli <cmd...> --config FILE ; compose: stormpy <cmd...> --config FILE
        assert argv[:3][1:] == ["-m", "stormpy.cli"]
        assert command[0] == "stormpy"
        assert command[1:-1] == argv[3:-1], f"{service}: {command} differs from the fixture's {argv}"
        mounted = {v.split(":")[1]: v.split(":")[0] for v in spec.get("volumes", [])}
        assert command[-1] in mounted, f"{service}: its config file is not mounted"
        load_config(REPO / mounted[command[-1]])     # parses with stormpy's own loader


def test_compose_config_points_at_the_services():
    conf = load_config(REPO / "docker" / "storm.yaml")
    assert conf["storm.zookeeper.servers"] == ["zookeeper"]
    assert conf["nimbus.seeds"] == ["nimbus", "nimbus2"]


def test_dockerfile_installs_stormpy():
    text = (REPO / "Dockerfile").read_text()
    assert "pip install" in text and "openjdk-17" in text


def test_each_nimbus_keeps_its_local_dir_on_a_volume():
    """issue 26: a Nimbus re-created without its storm.local.dir loses every topology's code."""
    local_dir = load_config(REPO / "docker" / "storm.yaml")["storm.local.dir"]
    spec = compose()
    for service in ("nimbus", "nimbus2"):
        mounts = {v.split(":")[1]: v.split(":")[0] for v in spec["services"][service]["volumes"]}
        assert mounts.get(local_dir) == f"{service}-local", f"{service} has no volume at {local_dir}"
        assert f"{service}-local" in spec["volumes"]


def test_compose_kafka_is_an_optional_real_broker():
    kafka = compose()["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:") and kafka["profiles"] == ["kafka"]
    assert kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"


def test_every_published_port_says_what_it_exposes():
    """Issue 26 item 4: security is off in this file; each published port names its exposure."""
    published = [port for spec in compose()["services"].values() for port in spec.get("ports", [])]
    assert published, "the compose file publishes ports"
    lines = (REPO / "docker-compose.yml").read_text().splitlines()
    for port in published:
        line = next(line for line in lines if f'"{port}"' in line)
        comment = line.partition("#")[2].strip()
        assert len(comment) > 20 and ("anyone" in comment or "same exposure" in comment), \
            f"published port {port} has no comment on what it exposes: {line!r}"
