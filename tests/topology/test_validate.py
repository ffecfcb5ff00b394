"""Every invalid topology of DESIGN section 5 raises InvalidTopologyException naming the culprit."""
from __future__ import annotations

import pytest

from stormpy import Bolt, Grouping, Spout, Stream, Topology
from stormpy.thrift import storm
from stormpy.api.compile import compile_topology
from stormpy.topology.validate import parse_json_conf, validate_topology, validate_topology_name


class Words(Spout):
    outputs = ["word"]

    def next_tuple(self) -> None:
        self.emit(["a"])


class Pairs(Spout):
    outputs = [Stream(["left", "right"], name="pairs"), Stream(["x"], name="picked", direct=True)]

    def next_tuple(self) -> None:
        self.emit(["a", "b"], stream="pairs")


class Sink(Bolt):
    def process(self, tup) -> None:
        pass


def check(topology_cls: type[Topology], conf: dict | None = None) -> None:
    validate_topology(compile_topology(topology_cls), conf if conf is not None else topology_cls.config)


def assert_invalid(topology_cls: type[Topology], *fragments: str, conf: dict | None = None) -> None:
    with pytest.raises(storm.InvalidTopologyException) as err:
        check(topology_cls, conf)
    for fragment in fragments:
        assert fragment in err.value.msg, err.value.msg


def test_valid_topology_passes() -> None:
    class Good(Topology):
        words = Words.spec(par=2)
        pairs = Pairs.spec()
        sink = Sink.spec(inputs={words: Grouping.fields("word"), pairs["pairs"]: Grouping.partial_key("left"),
                                 pairs["picked"]: Grouping.DIRECT}, par=3)

    check(Good)


def test_duplicate_component_ids() -> None:
    # streamparse's rule: caught where the class is defined
    with pytest.raises(ValueError, match="duplicate component name 'same'"):
        class Dup(Topology):
            a = Words.spec(name="same")
            b = Sink.spec(name="same", inputs=[a])


def test_reserved_ids() -> None:
    class Reserved(Topology):
        a = Words.spec(name="__acker")

    assert_invalid(Reserved, "'__acker'", "reserved")


def test_unknown_component_input() -> None:
    class Stray(Topology):
        a = Words.spec()
        b = Sink.spec(inputs=[Words.spec(name="elsewhere")])

    assert_invalid(Stray, "'b'", "not a component of this topology")


def test_unknown_stream() -> None:
    with pytest.raises(KeyError, match="no stream 'missing'"):
        class NoStream(Topology):
            a = Words.spec()
            b = Sink.spec(inputs={a["missing"]: Grouping.SHUFFLE})


def test_undeclared_grouping_field() -> None:
    with pytest.raises(ValueError, match="field 'nope' in the grouping of 'b'.*fields: word"):
        class BadField(Topology):
            a = Words.spec()
            b = Sink.spec(inputs={a: Grouping.fields("nope")})


def test_undeclared_partial_key_field() -> None:
    with pytest.raises(ValueError, match="'middle'"):
        class BadKey(Topology):
            a = Pairs.spec()
            b = Sink.spec(inputs={a["pairs"]: Grouping.partial_key("middle")})


def test_direct_grouping_needs_direct_stream() -> None:
    class NotDirect(Topology):
        a = Words.spec()
        b = Sink.spec(inputs={a: Grouping.DIRECT})

    assert_invalid(NotDirect, "not declared direct")


@pytest.mark.parametrize("par", [0, -3])
def test_parallelism_below_one(par: int) -> None:
    with pytest.raises(ValueError, match="parallelism must be at least 1"):
        Words.spec(par=par)


def test_no_spouts() -> None:
    """As in streamparse, at class definition; Nimbus refuses a spout-less StormTopology too."""
    with pytest.raises(ValueError, match="Empty: a Topology requires at least one Spout"):
        class Empty(Topology):
            pass

    with pytest.raises(storm.InvalidTopologyException, match="no spouts"):
        validate_topology(storm.StormTopology(spouts={}, bolts={}, state_spouts={}), {})


def test_non_json_component_conf() -> None:
    class BadConf(Topology):
        a = Words.spec(config={"x": object()})

    assert_invalid(BadConf, "'a'", "JSON")


def test_non_json_topology_conf() -> None:
    class Fine(Topology):
        a = Words.spec()

    assert_invalid(Fine, "JSON", conf={"x": {1, 2}})
    with pytest.raises(storm.InvalidTopologyException):
        parse_json_conf("{not json")
    with pytest.raises(storm.InvalidTopologyException):
        parse_json_conf("[1, 2]")


def test_wrongly_typed_known_key() -> None:
    class Fine(Topology):
        a = Words.spec()

    assert_invalid(Fine, "topology.workers", conf={"topology.workers": "many"})


def test_spark_batch_longer_than_message_timeout() -> None:
    class Slow(Topology):
        a = Words.spec()
        b = Sink.spec(inputs=[a], config={"spark.sink.batch.secs": 60})

    assert_invalid(Slow, "spark.sink.batch.secs", "topology.message.timeout.secs")


@pytest.mark.parametrize("name", ["", "  ", "a/b", "a.b", "a:b", "a\\b"])
def test_bad_topology_names(name: str) -> None:
    with pytest.raises(storm.InvalidTopologyException):
        validate_topology_name(name)


def test_good_topology_name() -> None:
    validate_topology_name("word-count_2")


def test_short_message_timeout_without_spark_is_fine() -> None:
    from stormpy.config import Config

    class Quick(Topology):
        a = Words.spec()
        b = Sink.spec(inputs=[a])

    check(Quick, Config({"topology.message.timeout.secs": 2}).to_dict())
    assert_invalid(Quick, "spark.sink.batch.secs", conf={"topology.message.timeout.secs": 2, "spark.sink.batch.secs": 3})
