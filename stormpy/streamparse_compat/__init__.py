"""Run streamparse/pystorm code unchanged: ``import streamparse`` resolves to stormpy.

A streamparse project's spouts, bolts and topology files say ``from streamparse import Bolt``
or ``from pystorm.spout import Spout``. When the real packages are not installed (the normal
case: stormpy runs those classes natively, without streamparse's multilang machinery), the
finder installed by :func:`install_aliases` answers those imports with stormpy's own modules
(``stormpy.bolt``, ``stormpy.spout``, ``stormpy.component``, ``stormpy.storm``, ``stormpy.dsl``,
``stormpy.thrift``), so classes defined against streamparse *are* stormpy classes.

The topology loader and the worker's class resolution call :func:`install_aliases` before any
user code is imported; the first import of an aliased name logs one INFO line per process
(a topology that never imports streamparse or pystorm logs nothing about them). A really installed streamparse or pystorm
always wins: a name is aliased only if nothing else on ``sys.path`` provides it.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

#: alias module -> stormpy module that answers it. Packages (they have submodules) in PACKAGES.
ALIASES: dict[str, str] = {
    "streamparse": "stormpy.streamparse_compat.api",
    "streamparse.bolt": "stormpy.streamparse_compat.bolt",
    "streamparse.spout": "stormpy.streamparse_compat.spout",
    "streamparse.component": "stormpy.streamparse_compat.component",
    "streamparse.storm": "stormpy.streamparse_compat.storm",
    "streamparse.storm.bolt": "stormpy.streamparse_compat.bolt",
    "streamparse.storm.spout": "stormpy.streamparse_compat.spout",
    "streamparse.storm.component": "stormpy.streamparse_compat.component",
    "streamparse.dsl": "stormpy.streamparse_compat.dsl",
    "streamparse.dsl.topology": "stormpy.streamparse_compat.dsl",
    "streamparse.dsl.stream": "stormpy.streamparse_compat.dsl",
    "streamparse.dsl.component": "stormpy.streamparse_compat.dsl",
    "streamparse.dsl.bolt": "stormpy.streamparse_compat.dsl",
    "streamparse.dsl.spout": "stormpy.streamparse_compat.dsl",
    "streamparse.thrift": "stormpy.thrift",
    "streamparse.version": "stormpy.version",
    "pystorm": "stormpy.streamparse_compat.storm",
    "pystorm.bolt": "stormpy.streamparse_compat.bolt",
    "pystorm.spout": "stormpy.streamparse_compat.spout",
    "pystorm.component": "stormpy.streamparse_compat.component",
    "pystorm.version": "stormpy.version",
}
PACKAGES = frozenset({"streamparse", "streamparse.storm", "streamparse.dsl", "pystorm"})
ROOTS = ("streamparse", "pystorm")

_lock = threading.Lock()
_installed: "AliasFinder | None" = None


def _really_installed(root: str) -> bool:
    """Whether ``root`` is importable without our finder (a real streamparse/pystorm)."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(root)
    except (ImportError, ValueError):
        return False
    # A bare directory of that name on sys.path (a namespace package, e.g. tests/streamparse/)
    # is not the library.
    return spec is not None and spec.origin is not None and spec.loader is not None


class AliasLoader(importlib.abc.Loader):
    """Creates the alias module: a fresh module holding the target module's public names.

    A separate module object (not the target itself) keeps stormpy's own modules untouched
    (their ``__spec__``/``__name__`` stay theirs) while ``streamparse.Bolt is stormpy.Bolt``.
    """

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        target = importlib.import_module(self.target)
        module = types.ModuleType(spec.name, target.__doc__)
        module.__dict__.update({k: v for k, v in vars(target).items() if not k.startswith("__")})
        if hasattr(target, "__all__"):
            module.__all__ = list(target.__all__)
        module.__stormpy_alias_of__ = self.target  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the names were copied in create_module."""


class AliasFinder(importlib.abc.MetaPathFinder):
    """Answers imports of the aliased names (only those of roots not really installed)."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = tuple(roots)
        self.announced = False

    def _announce(self, fullname: str) -> None:
        """Once per process, when an aliased name is first imported: where it comes from."""
        if self.announced:
            return
        self.announced = True
        log.info("%s not installed: `import %s` resolves to stormpy's compatible modules "
                 "(stormpy.bolt, stormpy.spout, stormpy.dsl, ...)", " and ".join(self.roots), fullname)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] not in self.roots:
            return None
        stormpy_name = ALIASES.get(fullname)
        if stormpy_name is None:
            return None   # e.g. streamparse.cli: not offered; the import fails as it would without streamparse
        self._announce(fullname)
        return importlib.util.spec_from_loader(fullname, AliasLoader(stormpy_name),
                                               is_package=fullname in PACKAGES)


def install_aliases() -> bool:
    """Install the streamparse/pystorm import aliases once per process; True if any is active."""
    global _installed
    with _lock:
        if _installed is not None:
            return bool(_installed.roots)
        roots = [root for root in ROOTS if root not in sys.modules and not _really_installed(root)]
        _installed = AliasFinder(roots)
        if roots:
            sys.meta_path.insert(0, _installed)
            # Said only when user code really imports one of the names (AliasFinder.find_spec):
            # a topology that never mentions streamparse runs without a word about it.
            log.debug("import aliases installed for %s", " and ".join(roots))
        return bool(roots)


def uninstall_aliases() -> None:
    """Remove the finder and the alias modules (tests)."""
    global _installed
    with _lock:
        if _installed is not None and _installed in sys.meta_path:
            sys.meta_path.remove(_installed)
        _installed = None
        for name in list(sys.modules):
            if name.split(".", 1)[0] in ROOTS and getattr(sys.modules[name], "__stormpy_alias_of__", None):
                del sys.modules[name]
