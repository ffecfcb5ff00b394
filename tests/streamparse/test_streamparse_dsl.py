"""The streamparse DSL's Thrift views as streamparse shows them: ``thrift_topology`` with dict
``par`` and Java components, ``Topology.read``, ``Topology.to_flux_dict``, the no-spout check, and
Nimbus refusing the JavaObject that a Storm client (the real ``sparse submit``) sends.

Imports go through the streamparse aliases, as a streamparse user's topology file would.
"""
from __future__ import annotations

import io

import pytest

from stormpy.streamparse_compat import install_aliases

install_aliases()

from streamparse import Bolt, Grouping, JavaBolt, JavaSpout, ShellBolt, Spout, Stream, Topology  # noqa: E402
from streamparse.thrift import JavaObjectArg  # noqa: E402

from stormpy.thrift import storm  # noqa: E402
from stormpy.api.compile import compile_topology  # noqa: E402
from stormpy.topology.validate import validate_topology  # noqa: E402


class WordSpout(Spout):
    outputs = ["word"]


class CountBolt(Bolt):
    outputs = ["word", "count"]


class SplitBolt(Bolt):
    outputs = [Stream(["word"]), Stream(["total"], name="sum")]


def test_thrift_topology_keeps_dict_par_and_java_objects() -> None:
    class T(Topology):
        words = WordSpout.spec(par={"prod": 5, "beta": 1})
        count = JavaBolt.spec(full_class_name="com.example.Count", args_list=["a", 1, b"\x01", True, 2.5],
                              inputs={words: Grouping.fields("word")}, outputs=["word", "count"])
        raw = JavaSpout.spec(serialized_java=b"\xac\xed", outputs=["x"])

    assert T.thrift_spouts["words"].common.parallelism_hint == {"prod": 5, "beta": 1}
    java = T.thrift_bolts["count"].bolt_object
    assert java.shell is None and java.serialized_java is None and java.python_object is None
    assert java.java_object.full_class_name == "com.example.Count"
    assert java.java_object.args_list == [JavaObjectArg(string_arg="a"), JavaObjectArg(long_arg=1),
                                          JavaObjectArg(binary_arg=b"\x01"), JavaObjectArg(bool_arg=True),
                                          JavaObjectArg(double_arg=2.5)]
    assert T.thrift_spouts["raw"].spout_object.serialized_java == b"\xac\xed"
    assert T.thrift_topology is T.thrift_topology      # built once: changes stick, as in streamparse
    # what stormpy runs stays strict: one line naming the component
    with pytest.raises(storm.InvalidTopologyException, match="'count' is a JavaBolt"):
        compile_topology(T, environment="prod")


def test_java_args_must_be_basic_types() -> None:
    with pytest.raises(TypeError, match="basic data types"):
        JavaBolt.spec(full_class_name="com.example.Count", args_list=[{"a": 1}], inputs=[], outputs=["x"])


def test_nimbus_refuses_java_objects_also_as_a_storm_client_sends_them() -> None:
    class T(Topology):
        words = WordSpout.spec()
        count = JavaBolt.spec(full_class_name="com.example.Count", args_list=[],
                              inputs={words: Grouping.SHUFFLE}, outputs=["word", "count"])

    with pytest.raises(storm.InvalidTopologyException, match="JavaObject \\(com.example.Count\\)"):
        validate_topology(T.thrift_topology, {})
    # Storm's ComponentObject field 3 is a JavaObject; stormpy reads it as a PythonObject
    class P(Topology):
        words = WordSpout.spec()

    topology = compile_topology(P)
    topology.spouts["words"].spout_object = storm.ComponentObject(
        python_object=storm.PythonObject(class_name="com.example.Words"))
    with pytest.raises(storm.InvalidTopologyException, match="names 'com.example.Words', not a Python"):
        validate_topology(topology, {})


def test_no_spout_is_an_error_at_class_definition() -> None:
    with pytest.raises(ValueError, match="requires at least one Spout"):
        class NoSpout(Topology):
            pass


def test_read_replaces_the_thrift_topology() -> None:
    class T(Topology):
        words = WordSpout.spec(par=2)
        count = CountBolt.spec(inputs={words: Grouping.fields("word")}, par=3)

    out = io.BytesIO()
    T.write(out)

    class Other(Topology):
        words = WordSpout.spec()

    Other.read(io.BytesIO(out.getvalue()))
    assert Other.specs == []
    assert Other.thrift_bolts["count"].common.parallelism_hint == 3
    assert Other.thrift_topology == T.thrift_topology


def test_to_flux_dict_as_streamparse_writes_it() -> None:
    class T(Topology):
        words = WordSpout.spec(par=2)
        split = SplitBolt.spec(inputs={words: Grouping.fields("word")}, config={"k": 1})
        count = CountBolt.spec(inputs={split: Grouping.SHUFFLE, split["sum"]: Grouping.GLOBAL}, par=4)
        perl = ShellBolt.spec(command="perl", script="x.pl", inputs=[count], outputs=[])
        java = JavaBolt.spec(full_class_name="com.example.J", args_list=["a", 2], inputs=[count], outputs=[])

    flux = T.to_flux_dict("wc")
    here = __name__
    assert flux["name"] == "wc"
    assert flux["spouts"] == [{"id": "words", "className": "org.apache.storm.flux.wrappers.spouts.FluxShellSpout",
                               "constructorArgs": [["streamparse_run", f"{here}.WordSpout"], ["word"]],
                               "configMethods": [], "parallelism": 2}]
    split, count, perl, java = flux["bolts"]
    assert split["constructorArgs"] == [["streamparse_run", f"{here}.SplitBolt"], ["word"]]
    assert split["configMethods"] == [{"name": "setNamedStream", "args": ["sum", ["total"]]},
                                      {"name": "addComponentConfig", "args": ["k", 1]}]
    assert count["parallelism"] == 4
    assert perl["constructorArgs"] == [["perl", "x.pl"], ["NONE_BUT_FLUX_WANTS_SOMETHING_HERE"]]
    assert java == {"id": "java", "className": "com.example.J", "constructorArgs": ["a", 2]}
    streams = {(s["from"], s["to"], s["grouping"]["streamId"]): s["grouping"] for s in flux["streams"]}
    assert streams[("words", "split", "default")] == {"streamId": "default", "type": "FIELDS", "args": ["word"]}
    assert streams[("split", "count", "default")]["type"] == "SHUFFLE"
    assert streams[("split", "count", "sum")]["type"] == "GLOBAL"
    assert len(streams) == 5
