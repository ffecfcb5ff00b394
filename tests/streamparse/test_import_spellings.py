"""Every module path streamparse/pystorm code and stormpy users import still answers (issue 21).

The root modules ``stormpy/bolt.py``, ``spout.py``, ``component.py``, ``storm.py`` and ``dsl.py``
are gone: their names live in ``stormpy.streamparse_compat``, and the finder that ``import
stormpy`` registers answers the old paths. Each check runs in a fresh interpreter, so no
earlier import in the test process can make it pass.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from stormpy.streamparse_compat import ALIASES, STORMPY_PATHS


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("spelling", sorted(STORMPY_PATHS))
def test_stormpy_module_paths_import(spelling: str) -> None:
    result = _run(f"import {spelling} as m; from stormpy.streamparse_compat import STORMPY_PATHS; "
                  f"import importlib; target = importlib.import_module(STORMPY_PATHS[{spelling!r}]); "
                  "names = getattr(target, '__all__', None) or [n for n in vars(target) if not n.startswith('_')]; "
                  "assert names and getattr(m, '__all__', names) == names; "
                  "assert all(getattr(m, n) is getattr(target, n) for n in names)")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("spelling", sorted(ALIASES))
def test_streamparse_and_pystorm_paths_import_after_stormpy(spelling: str) -> None:
    result = _run(f"import stormpy, {spelling} as m; assert m.__stormpy_alias_of__ == {ALIASES[spelling]!r}")
    assert result.returncode == 0, result.stderr


def test_the_names_users_import_are_the_same_classes() -> None:
    code = """
from stormpy import Bolt, Spout, Topology, Tuple, BatchingBolt, TicklessBatchingBolt, Grouping, Stream
from stormpy import StatefulBolt, StatefulWindowedBolt, WindowedBolt, __version__
from stormpy.bolt import Bolt as B1, ShellBolt, JavaBolt
from stormpy.spout import Spout as S1, ReliableSpout, ShellSpout
from stormpy.component import Component, StormHandler
from stormpy.storm import Bolt as B2, Tuple as T2
from stormpy.dsl import Topology as Top2, Grouping as G2
import streamparse
from streamparse import Bolt as B3, Topology as Top3, Grouping as G3
from streamparse.dsl.stream import Grouping as G4
from pystorm import Spout as S3
from pystorm.component import StormHandler as H2
assert Bolt is B1 is B2 is B3 is streamparse.Bolt
assert Spout is S1 is S3 and Topology is Top2 is Top3 and Grouping is G2 is G3 is G4
assert Tuple is T2 and StormHandler is H2 and issubclass(ReliableSpout, Spout)
assert streamparse.VERSION == __version__
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr


def test_import_stormpy_loads_no_user_api_until_a_name_is_used() -> None:
    code = ("import sys, stormpy; assert not [m for m in sys.modules if m.startswith(('stormpy.api', 'stormpy.task'))]; "
            "stormpy.Bolt; assert 'stormpy.api.component' in sys.modules")
    result = _run(code)
    assert result.returncode == 0, result.stderr


def test_a_path_streamparse_never_had_still_fails() -> None:
    result = _run("import stormpy, streamparse.cli")
    assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr
