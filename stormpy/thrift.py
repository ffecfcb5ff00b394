"""Loads ``idl/storm.thrift`` with thriftpy2 and (de)serializes its structs.

Everything that touches Thrift types imports them from here (``from stormpy.thrift import
storm``), so the IDL is parsed once per process. The ZooKeeper and local-state structs are
stored with the compact protocol; the RPC service speaks framed binary, as Storm clients do.
"""
from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import thriftpy2
from thriftpy2.protocol import TCompactProtocolFactory
from thriftpy2.utils import deserialize as _deserialize
from thriftpy2.utils import serialize as _serialize

_HERE = Path(__file__).resolve().parent
# stormpy/idl is a link to the repository's idl/ (and a copy in an installed wheel).
_CANDIDATES = (_HERE / "idl" / "storm.thrift", _HERE.parent / "idl" / "storm.thrift")
IDL_PATH = next((p for p in _CANDIDATES if p.exists()), _CANDIDATES[-1])

storm = thriftpy2.load(str(IDL_PATH), module_name="storm_thrift")

_PROTOCOL = TCompactProtocolFactory()
T = TypeVar("T")


def serialize(obj: object) -> bytes:
    """Encode a Thrift struct for ZooKeeper or local state (compact protocol)."""
    return _serialize(obj, _PROTOCOL)


def deserialize(cls: type[T], data: bytes) -> T:
    """Decode bytes written by :func:`serialize` into a new ``cls`` instance."""
    return _deserialize(cls(), data, _PROTOCOL)


# streamparse.thrift's names (``from streamparse.thrift import GlobalStreamId, storm_thrift``):
# the structs of the same IDL, at module level.
storm_thrift = storm
for _name in ("Bolt", "ComponentCommon", "ComponentObject", "GlobalStreamId", "Grouping", "NullStruct",
              "ShellComponent", "SpoutSpec", "StateSpoutSpec", "StormTopology", "StreamInfo", "SubmitOptions",
              "TopologyInitialStatus", "Nimbus", "JavaObject", "JavaObjectArg"):
    if hasattr(storm, _name):
        globals()[_name] = getattr(storm, _name)
