"""Loading topology files: the happy path and each kind of broken file."""
from __future__ import annotations

from pathlib import Path

import pytest

from stormpy.errors import TopologyFileError
from stormpy.api.loader import load_topology_file

GOOD = '''
from stormpy import Spout, Topology

class Numbers(Spout):
    outputs = ["n"]
    def next_tuple(self):
        self.emit([1])

class Only(Topology):
    numbers = Numbers.spec()
'''


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_the_topology_class(tmp_path: Path) -> None:
    cls = load_topology_file(write(tmp_path, "good_topo.py", GOOD))
    assert cls.__name__ == "Only" and cls.__module__ == "good_topo"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyFileError, match="not found"):
        load_topology_file(tmp_path / "nope.py")


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "broken_syntax.py", "x = 1\ndef oops(:\n")
    with pytest.raises(TopologyFileError, match=r"broken_syntax.py:2: syntax error"):
        load_topology_file(path)


def test_import_error_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad_import.py", "import not_a_module_anywhere\n")
    with pytest.raises(TopologyFileError, match="ModuleNotFoundError"):
        load_topology_file(path)


def test_no_topology_class(tmp_path: Path) -> None:
    path = write(tmp_path, "no_topo.py", "from stormpy import Spout\nclass S(Spout):\n    pass\n")
    with pytest.raises(TopologyFileError, match="defines no Topology subclass"):
        load_topology_file(path)


def test_two_topology_classes(tmp_path: Path) -> None:
    path = write(tmp_path, "two_topos.py", GOOD + "\nclass Second(Topology):\n    numbers = Numbers.spec()\n")
    with pytest.raises(TopologyFileError, match="several Topology subclasses"):
        load_topology_file(path)
