"""Config keys: defaults, YAML files, -c overrides parsed as YAML, type checks naming the key."""
from __future__ import annotations

from pathlib import Path

import pytest

from stormpy import config as cfg
from stormpy.config import ConfigError, load_config, parse_override


def test_storm_defaults() -> None:
    conf = load_config()
    assert conf[cfg.NIMBUS_THRIFT_PORT] == 6627
    assert conf["supervisor.slots.ports"] == [6700, 6701, 6702, 6703]
    assert conf["topology.message.timeout.secs"] == 30
    assert conf["storm.zookeeper.root"] == "/storm"
    assert conf["ui.port"] == 8080


def test_overrides_parse_as_yaml() -> None:
    assert parse_override("supervisor.slots.ports=[6700,6701]") == ("supervisor.slots.ports", [6700, 6701])
    assert parse_override("topology.debug=true") == ("topology.debug", True)
    assert parse_override("my.key=hello world") == ("my.key", "hello world")
    assert parse_override("x=1.5") == ("x", 1.5)
    with pytest.raises(ConfigError):
        parse_override("no-equals-sign")


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "storm.yaml"
    path.write_text("nimbus.thrift.port: 7000\nstorm.zookeeper.servers: [zk1, zk2]\nuser.thing: 3\n")
    conf = load_config(path, ["nimbus.thrift.port=7001"])
    assert conf["nimbus.thrift.port"] == 7001
    assert conf["storm.zookeeper.servers"] == ["zk1", "zk2"]
    assert conf["user.thing"] == 3


def test_bad_values_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nimbus.thrift.port"):
        load_config(None, ["nimbus.thrift.port=lots"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_numeric_strings_coerce() -> None:
    conf = load_config(None, {"topology.workers": "3"})
    assert conf["topology.workers"] == 3


def test_redacted_hides_credential_looking_values_at_any_depth() -> None:
    """Issue 26 item 8: what the UI and getTopologyConf (for non-admins) show."""
    from stormpy.config import redacted

    conf = {"kafka.sasl.password": "p1", "app.secret": "s1", "auth.token": "t1", "empty.password": None,
            "storm.zookeeper.auth.payload": "u:p2", "urls": ["https://me:p3@host/x", "https://host/y"],
            "topology.environment": {"DB_PASSWD": "p4", "HOME": "/h"}, "topology.workers": 2}
    assert redacted(conf) == {
        "kafka.sasl.password": "****", "app.secret": "****", "auth.token": "****", "empty.password": None,
        "storm.zookeeper.auth.payload": "****", "urls": ["https://me:****@host/x", "https://host/y"],
        "topology.environment": {"DB_PASSWD": "****", "HOME": "/h"}, "topology.workers": 2}
