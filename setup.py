"""Build script: the pure-Python package, and with ``STORMPY_COMPILE=1`` the tuple path compiled.

``STORMPY_COMPILE=1 pip install .`` compiles the modules in :data:`COMPILED` with mypyc (shipped
with mypy, which the build backend then asks for) into C extensions that sit next to their
``.py`` files and win the import. Anything in the way (no mypyc, no working C compiler or Python
headers, a failed compile) prints one line and the install goes on pure Python: the same code,
slower. Editable installs (``pip install -e``) are always pure: a compiled module next to its
source would hide every edit of it. Everything else is in ``pyproject.toml``.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

#: Per-tuple code with no user subclasses or runtime patching (they pass ``mypy --strict``):
#: emit paths and tuple trees, routing, the bolt drivers, the acker's ledger.
COMPILED = [
    "stormpy/task/tree.py",
    "stormpy/task/emit.py",
    "stormpy/task/grouping.py",
    "stormpy/task/drivers.py",
    "stormpy/acker/ledger.py",
]
EDITABLE_COMMANDS = {"editable_wheel", "develop"}
#: Commands that only write metadata or the sdist: nothing to compile (saves a mypyc run).
METADATA_COMMANDS = {"egg_info", "dist_info", "sdist"}
BUILD_COMMANDS = {"bdist_wheel", "build", "build_ext", "install"}


def say(why: str) -> None:
    print(f"stormpy: {why}", file=sys.stderr, flush=True)


def compiler_works() -> str | None:
    """None if a C extension can be built here, else why not (compiler or Python.h missing)."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler, get_python_inc

    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "probe.c")
        source.write_text("#include <Python.h>\nint stormpy_probe(void) { return 0; }\n")
        try:
            compiler.compile([str(source)], output_dir=tmp, include_dirs=[get_python_inc()])
        except Exception as exc:  # CompileError, or no compiler executable at all
            return f"no working C compiler for Python extensions ({str(exc).strip() or type(exc).__name__})"
    return None


def compiled_modules() -> list:
    """The mypyc extensions to build, or [] (pure Python), saying why in one line."""
    flag = os.environ.get("STORMPY_COMPILE", "0").strip()
    if flag != "1":
        return []
    commands = set(sys.argv[1:])
    if METADATA_COMMANDS & commands and not BUILD_COMMANDS & commands:
        return []
    if EDITABLE_COMMANDS & commands:
        say("editable install: pure-Python modules (STORMPY_COMPILE applies to non-editable installs)")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        say(f"STORMPY_COMPILE=1 but mypyc is not importable ({exc}): installing the pure-Python modules")
        return []
    why = compiler_works()
    if why is not None:
        say(f"STORMPY_COMPILE=1 but {why}: installing the pure-Python modules")
        return []
    try:
        return mypycify(COMPILED, opt_level="3", group_name="stormpy_native")
    except (Exception, SystemExit) as exc:  # mypy errors exit through SystemExit
        say(f"mypyc could not compile the tuple path ({exc}): installing the pure-Python modules")
        return []


class FallbackBuildExt(build_ext):
    """A compile that fails after mypyc generated the C leaves the pure modules installed.

    The extensions built before the failure go too: the compiled modules share one native
    library and expect each other compiled, so it is all of them or none."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            say(f"compiling the tuple path failed ({exc}): installing the pure-Python modules")
            for ext in self.extensions:
                for built in (self.get_ext_fullpath(ext.name), Path(self.build_lib) / self.get_ext_filename(ext.name)):
                    Path(built).unlink(missing_ok=True)
            self.extensions = []


setup(ext_modules=compiled_modules(), cmdclass={"build_ext": FallbackBuildExt})
