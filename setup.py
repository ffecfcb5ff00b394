"""Build script: the pure-Python package, and with ``STORMPY_COMPILE=1`` the tuple path compiled.

``STORMPY_COMPILE=1 pip install .`` compiles the modules in :data:`COMPILED` with Cython (which
the build backend then asks for) into C extensions that sit next to their ``.py`` files and win
the import. Anything in the way (no Cython, no working C compiler or Python headers, a failed
compile) prints one line and the install goes on pure Python: the same code, slower. Editable
installs (``pip install -e``) are always pure: a compiled module would hide every edit of it.
Everything else is in ``pyproject.toml``.

Why Cython and not mypyc: on today's tuple path (closures over untyped values) mypyc's modules
ran as many machine instructions per word as the interpreter (19,107 against 19,017, callgrind,
acked ``stormpy local`` word count at parallelism 2), Cython's 16,607 (-12.7%).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

#: Per-tuple code with no user subclasses or runtime patching: emit paths and tuple trees,
#: routing, the acker's ledger, and the bolt's receive loop with the Tuple it builds. The last two
#: go together: ``api/tuple.pxd`` makes ``Tuple`` an extension type whose slots are C struct
#: fields, and ``task/drivers.pxd`` types the loop's tuple as one, so storing a received tuple's
#: ten slots is ten pointer writes. Compiled without those declarations the loop stored each
#: slot through ``setattr`` (about 190 machine instructions) and cost a word 4% more than
#: interpreted; with them, a word costs 16% less CPU than with the loop interpreted. Where the
#: emit closures and the settling loops declare C types (``cython.declare``, ``cython.locals``,
#: ``task/tree.pxd``: tuple-tree ids from a C generator, the tuple in hand's edges a C integer),
#: a word costs another 24% fewer instructions. Compiling the executors and the scheduler loop
#: saved another 1%: not worth compiled code users may patch in tests.
COMPILED = [
    "stormpy/task/runs.py",
    "stormpy/task/tree.py",
    "stormpy/task/emit.py",
    "stormpy/task/grouping.py",
    "stormpy/acker/ledger.py",
    "stormpy/api/tuple.py",
    "stormpy/task/drivers.py",
]
EDITABLE_COMMANDS = {"editable_wheel", "develop"}
#: Commands that only write metadata or the sdist: nothing to compile (saves a Cython run).
METADATA_COMMANDS = {"egg_info", "dist_info", "sdist"}
BUILD_COMMANDS = {"bdist_wheel", "build", "build_ext", "install"}
#: The compiled modules behave as the interpreted ones: annotations are not types to Cython (a
#: ``list`` parameter handed a tuple, a ``float`` one an int, work as they do in Python).
DIRECTIVES = {"language_level": 3, "annotation_typing": False}
#: Cython's generated C goes here, not next to the sources.
CYTHON_BUILD_DIR = "build/cython"


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
    """The Cython extensions to build, or [] (pure Python), saying why in one line."""
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
        from Cython.Build import cythonize
    except ImportError as exc:
        say(f"STORMPY_COMPILE=1 but Cython is not importable ({exc}): installing the pure-Python modules")
        return []
    why = compiler_works()
    if why is not None:
        say(f"STORMPY_COMPILE=1 but {why}: installing the pure-Python modules")
        return []
    try:
        return cythonize(COMPILED, compiler_directives=DIRECTIVES, build_dir=CYTHON_BUILD_DIR, quiet=True)
    except (Exception, SystemExit) as exc:  # Cython reports compile errors by raising
        say(f"Cython could not compile the tuple path ({exc}): installing the pure-Python modules")
        return []


class FallbackBuildExt(build_ext):
    """A compile that fails after Cython generated the C leaves the pure modules installed.

    The extensions built before the failure go too: all of them or none, so that a machine runs
    the tuple path measured (docs/reference/benchmarks.md), not a mix."""

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
