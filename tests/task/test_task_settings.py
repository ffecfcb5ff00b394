"""ExecutorSettings and the component config: one reading of every key, through its declaration."""
from __future__ import annotations

import pytest

from stormpy import Bolt, Spout, Topology
from stormpy import config as cfg
from stormpy.config import ConfigError
from stormpy.task.settings import ExecutorSettings
from stormpy.api.compile import compile_topology
from stormpy.topology.plan import build_plan


def test_defaults_are_the_declared_ones() -> None:
    settings = ExecutorSettings.from_conf({})
    assert settings.restart_backoff_secs == cfg.TOPOLOGY_TASK_RESTART_BACKOFF_SECS.default == 0.05
    assert settings.transfer_batch_size == cfg.TOPOLOGY_TRANSFER_BATCH_SIZE.default
    assert settings.flush_interval_secs == cfg.TOPOLOGY_BATCH_FLUSH_INTERVAL_MILLIS.default / 1000.0
    assert settings.message_timeout_secs == cfg.TOPOLOGY_MESSAGE_TIMEOUT_SECS.default
    assert settings.max_spout_pending == 0 and settings.tick_freq_secs is None
    assert settings.sample_every == 20  # topology.stats.sample.rate 0.05
    assert settings.backpressure_enabled and settings.message_timeouts_enabled and not settings.debug


def test_values_are_coerced_and_null_means_the_default() -> None:
    settings = ExecutorSettings.from_conf({"topology.max.spout.pending": "7", "topology.debug": "true",
                                           "topology.transfer.batch.size": None,
                                           "topology.tick.tuple.freq.secs": "0.5",
                                           "topology.executor.receive.buffer.size": 1000})
    assert settings.max_spout_pending == 7 and settings.debug is True
    assert settings.transfer_batch_size == 1000 and settings.tick_freq_secs == 0.5
    assert (settings.high_watermark, settings.low_watermark) == (900, 500)


def test_a_bad_value_names_its_key() -> None:
    with pytest.raises(ConfigError, match="topology.max.spout.pending"):
        ExecutorSettings.from_conf({"topology.max.spout.pending": "many"})


def test_settings_are_frozen() -> None:
    settings = ExecutorSettings.from_conf({})
    with pytest.raises(AttributeError):
        settings.transfer_batch_size = 1  # type: ignore[misc]


class _Spout(Spout):
    outputs = ["n"]


class _Bolt(Bolt):
    outputs: list[str] = []


class _Topology(Topology):
    spout = _Spout.spec()
    bolt = _Bolt.spec(inputs=[spout], config={"topology.max.spout.pending": "12", "user.key": "kept"})


def test_component_config_is_coerced_by_the_same_declarations() -> None:
    plan = build_plan(compile_topology(_Topology), {"topology.workers": "2"}, "t-1", "t")
    bolt_conf = plan.components["bolt"].conf
    assert isinstance(bolt_conf, cfg.Config) and isinstance(plan.conf, cfg.Config)
    assert bolt_conf["topology.max.spout.pending"] == 12 and bolt_conf["user.key"] == "kept"
    assert bolt_conf["topology.workers"] == 2 and plan.components["spout"].conf["topology.max.spout.pending"] is None
    assert plan.components["__acker"].is_system and plan.components["__acker"].is_framework
    assert not plan.components["bolt"].is_system and not plan.components["bolt"].is_framework
