"""Run streamparse/pystorm code unchanged: ``import streamparse`` resolves to stormpy.

A streamparse project's spouts, bolts and topology files say ``from streamparse import Bolt``
or ``from pystorm.spout import Spout``. When the real packages are not installed (the normal
case: stormpy runs those classes natively, without streamparse's multilang machinery), the
finder registered here answers those imports with the modules of this package
(``stormpy.streamparse_compat.bolt``, ``.spout``, ``.component``, ``.storm``, ``.dsl``, and
``stormpy.thrift``), so classes defined against streamparse *are* stormpy classes. The same
finder answers stormpy's own spellings of those paths (``stormpy.bolt``, ``stormpy.spout``,
``stormpy.component``, ``stormpy.storm``, ``stormpy.dsl``), which have no file of their own:
the streamparse names live in this package only.

``import stormpy`` registers the finder (:func:`register`); this module imports nothing of
stormpy, so that costs daemons nothing, and the alias modules (which import the user API) are
imported only when user code asks for them. The first import of an aliased streamparse/pystorm
name logs one INFO line per process (a topology that never imports streamparse or pystorm logs
nothing about them). A really installed streamparse or pystorm always wins: a name is aliased
only if nothing else on ``sys.path`` provides it (checked when it is first imported).
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
from typing import Any

log = logging.getLogger(__name__)

#: stormpy's own module paths of streamparse's names (once files at the package root), and the
#: user API's old module paths.
STORMPY_PATHS: dict[str, str] = {
    "stormpy.bolt": "stormpy.streamparse_compat.bolt",
    "stormpy.spout": "stormpy.streamparse_compat.spout",
    "stormpy.component": "stormpy.streamparse_compat.component",
    "stormpy.storm": "stormpy.streamparse_compat.storm",
    "stormpy.dsl": "stormpy.streamparse_compat.dsl",
    # the user API's modules before they became stormpy.api (topology files and benchmarks
    # written against them keep importing)
    "stormpy.task.component": "stormpy.api.component",
    "stormpy.task.tuple": "stormpy.api.tuple",
    "stormpy.topology.dsl": "stormpy.api.dsl",
    "stormpy.topology.compile": "stormpy.api.compile",
    "stormpy.topology.loader": "stormpy.api.loader",
    "stormpy.topology.flux": "stormpy.api.flux",
    "stormpy.topology.foreign": "stormpy.api.foreign",
}
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
_finder: "AliasFinder | None" = None


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
        public = set(getattr(target, "__all__", ()))     # ``__version__`` of stormpy.storm, say
        module.__dict__.update({k: v for k, v in vars(target).items() if not k.startswith("__") or k in public})
        if hasattr(target, "__all__"):
            module.__all__ = list(target.__all__)
        module.__stormpy_alias_of__ = self.target  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the names were copied in create_module."""


class AliasFinder(importlib.abc.MetaPathFinder):
    """Answers stormpy's streamparse paths always, and streamparse/pystorm names while
    ``enabled`` (unless that root is really installed)."""

    def __init__(self) -> None:
        self.enabled = True
        self.announced = False
        #: root -> whether stormpy answers it; decided at its first import (a real one wins).
        self._aliased: dict[str, bool] = {}

    def aliased(self, root: str) -> bool:
        """Whether imports under ``root`` (streamparse or pystorm) are answered by stormpy."""
        if not self.enabled or root not in ROOTS:
            return False
        decided = self._aliased.get(root)
        if decided is None:
            loaded = sys.modules.get(root)
            if loaded is not None:
                decided = getattr(loaded, "__stormpy_alias_of__", None) is not None
            else:
                decided = not _really_installed(root)
            self._aliased[root] = decided
        return decided

    def _announce(self, fullname: str) -> None:
        """Once per process, when an aliased name is first imported: where it comes from."""
        if self.announced:
            return
        self.announced = True
        roots = [root for root in ROOTS if self.aliased(root)]
        log.info("%s not installed: `import %s` resolves to stormpy's compatible modules "
                 "(stormpy.bolt, stormpy.spout, stormpy.dsl, ...)", " and ".join(roots), fullname)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        own = STORMPY_PATHS.get(fullname)
        if own is not None:
            return importlib.util.spec_from_loader(fullname, AliasLoader(own))
        if not self.aliased(fullname.split(".", 1)[0]):
            return None
        stormpy_name = ALIASES.get(fullname)
        if stormpy_name is None:
            return None   # e.g. streamparse.cli: not offered; the import fails as it would without streamparse
        self._announce(fullname)
        return importlib.util.spec_from_loader(fullname, AliasLoader(stormpy_name),
                                               is_package=fullname in PACKAGES)


def register() -> AliasFinder:
    """Put the finder first on ``sys.meta_path`` (once per process; ``import stormpy`` does it)."""
    global _finder
    with _lock:
        if _finder is None:
            _finder = AliasFinder()
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
        return _finder


def install_aliases() -> bool:
    """Answer streamparse/pystorm imports from stormpy (the default once stormpy is imported);
    True if either is aliased, False if both are really installed."""
    finder = register()
    finder.enabled = True
    return any(finder.aliased(root) for root in ROOTS)


def uninstall_aliases() -> None:
    """Stop answering streamparse/pystorm imports and drop the alias modules (tests); stormpy's
    own paths (``stormpy.bolt``, ...) keep working."""
    finder = register()
    with _lock:
        finder.enabled = False
        finder._aliased.clear()
        for name in list(sys.modules):
            if name.split(".", 1)[0] in ROOTS and getattr(sys.modules[name], "__stormpy_alias_of__", None):
                del sys.modules[name]
