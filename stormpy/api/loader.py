"""Loads a user's topology file and finds its Topology subclass.

The file is imported as a module named by its stem with its directory first on ``sys.path``,
which is exactly how a worker imports it from the topology's code directory, so the
``module:Class`` names compiled here resolve the same way there.
"""
from __future__ import annotations

import importlib.util
import logging
import sys
import traceback
from pathlib import Path

from stormpy.errors import TopologyFileError
from stormpy.extras import MissingExtra, for_missing_module
from stormpy.api.dsl import Topology

log = logging.getLogger(__name__)


def module_name_for(path: Path) -> str:
    name = path.stem
    if not name.isidentifier():
        raise TopologyFileError(f"topology file name {path.name!r} is not a valid Python module name")
    return name


def import_topology_module(path: str | Path) -> object:
    """Import the file as module ``<stem>``; errors become one-line TopologyFileErrors."""
    file = Path(path)
    if not file.is_file():
        raise TopologyFileError(f"topology file {path} not found")
    if file.suffix != ".py":
        raise TopologyFileError(f"topology file {path} must be a .py file")
    file = file.resolve()
    name = module_name_for(file)
    # `import streamparse` / `pystorm` in the file: answered by the finder `import stormpy`
    # registered (stormpy.streamparse_compat).
    directory = str(file.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise TopologyFileError(f"cannot import topology file {path}")
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        _restore(name, previous)
        raise TopologyFileError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except MissingExtra:
        _restore(name, previous)
        raise                      # already the one line that says what to install
    except Exception as exc:
        _restore(name, previous)
        missing = for_missing_module(exc, str(path)) if isinstance(exc, ModuleNotFoundError) else None
        if missing is not None:    # `import pyspark` without the spark extra: name the extra
            raise missing from None
        where = _user_frame(exc, str(file))
        raise TopologyFileError(f"{path}{where}: importing it raised {type(exc).__name__}: {exc}") from None
    return module


def _restore(name: str, previous: object) -> None:
    if previous is None:
        sys.modules.pop(name, None)
    else:
        sys.modules[name] = previous


def _user_frame(exc: BaseException, filename: str) -> str:
    line = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename:
            line = f":{frame.lineno}"
    return line


def _is_user_topology(obj: object) -> bool:
    """A Topology subclass the user wrote (not a base class such as TridentTopology)."""
    return (isinstance(obj, type) and issubclass(obj, Topology) and obj is not Topology
            and not obj.__dict__.get("_base_topology_class", False))


def find_topology_class(module: object, path: str | Path) -> type[Topology]:
    name = getattr(module, "__name__", "")
    found = [obj for obj in vars(module).values() if _is_user_topology(obj) and obj.__module__ == name]
    if not found:
        found = [obj for obj in vars(module).values() if _is_user_topology(obj)]
    if not found:
        raise TopologyFileError(f"{path} defines no Topology subclass (class MyTopology(Topology): ...)")
    if len(found) > 1:
        names = ", ".join(sorted(cls.__name__ for cls in found))
        raise TopologyFileError(f"{path} defines several Topology subclasses ({names}); keep one per file")
    return found[0]


def load_topology_file(path: str | Path) -> type[Topology]:
    """The Topology subclass defined in ``path``."""
    module = import_topology_module(path)
    return find_topology_class(module, path)
