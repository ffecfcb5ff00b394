"""The tuple path compiled with Cython (``STORMPY_COMPILE=1``), and the pure-Python fallback.

``setup.py`` compiles ``COMPILED`` only when asked and able; anything in the way leaves the
pure-Python modules installed. Both outcomes are checked here on real builds of a copy of the
checkout (``setup.py build``, the step ``pip install .`` runs), each followed by an acked word
count run from the built tree alone:

- the default build and a ``STORMPY_COMPILE=1`` build whose C compiler does not work are pure
  (no extension module built, the one-line reason printed) and count words;
- a ``STORMPY_COMPILE=1`` build with Cython and a compiler present imports every compiled
  module from its extension and counts the same words (slow: compiling takes a minute here).

``STORMPY_EXPECT_COMPILED=1`` (``.ci/run`` sets it for the wheel it installs with the compiled
modules) runs the word count against whatever ``stormpy`` this interpreter imports and asserts
that it is the compiled one. After that step has passed, ``.ci/run`` sets
``STORMPY_COMPILED_STEP_PASSED`` (the wheel's directory) for the whole suite, whose own compiled build
then skips: the step built the same sources with ``STORMPY_COMPILE=1`` (``pip wheel``, which runs
``setup.py``) and ran this word count on every compiled module minutes earlier; building again
would cost the suite about 40 s.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODULES = ["stormpy.task.tree", "stormpy.task.emit", "stormpy.task.grouping", "stormpy.acker.ledger",
           "stormpy.api.tuple", "stormpy.task.drivers", "stormpy.task.runs"]
SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs"]
ROUNDS = 50
# read at import: the suite's autouse fixture removes STORMPY_* variables from each test's environment
EXPECT_COMPILED = os.environ.get("STORMPY_EXPECT_COMPILED") == "1"
COMPILED_STEP_PASSED = os.environ.get("STORMPY_COMPILED_STEP_PASSED", "")

#: A word count with acking (one acker, two split and two count tasks) run by LocalTopology;
#: prints which file each tuple-path module came from, the counts and the acked sentences.
WORDCOUNT = textwrap.dedent('''\
    import importlib, json, sys, threading
    from collections import Counter
    from stormpy import Bolt, Grouping, Spout, Topology
    from stormpy.local.runner import LocalTopology
    from stormpy.testing import wait_until

    MODULES, SENTENCES, ROUNDS = json.loads(sys.argv[1])
    STATE = {"acked": set(), "counts": Counter(), "lock": threading.Lock()}


    class Sentences(Spout):
        outputs = ["sentence"]

        def initialize(self, stormconf, context):
            self.next_id = 0

        def next_tuple(self):
            if self.next_id < ROUNDS * len(SENTENCES):
                self.emit([SENTENCES[self.next_id % len(SENTENCES)]], tup_id=self.next_id)
                self.next_id += 1

        def ack(self, tup_id):
            STATE["acked"].add(tup_id)


    class Split(Bolt):
        outputs = ["word"]

        def process(self, tup):
            for word in tup.values.sentence.split():
                self.emit([word])


    class Count(Bolt):
        outputs = []

        def process(self, tup):
            with STATE["lock"]:
                STATE["counts"][tup.values.word] += 1


    class WordCount(Topology):
        sentences = Sentences.spec(par=1)
        split = Split.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
        count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)


    local = LocalTopology(WordCount, "compiled-check", user_overrides={"topology.acker.executors": 1})
    local.start()
    try:
        wait_until(lambda: len(STATE["acked"]) == ROUNDS * len(SENTENCES), 60, "every sentence acked")
    finally:
        local.stop(drain_secs=0)
    from stormpy.task import tuple_path_build
    print(json.dumps({"files": {m: importlib.import_module(m).__file__ for m in MODULES},
                      "counts": STATE["counts"], "acked": len(STATE["acked"]), "build": tuple_path_build()}))
    ''')


def expected_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for sentence in SENTENCES:
        for word in sentence.split():
            counts[word] = counts.get(word, 0) + ROUNDS
    return counts


def run_wordcount(python_path: str | None, cwd: Path, without_cython: bool = False) -> dict[str, dict[str, str]]:
    """The word count in a fresh interpreter importing ``stormpy`` from ``python_path`` (or from
    wherever this interpreter finds it); asserts the counts and returns the module files.
    ``without_cython``: ``import cython`` fails in it, as where Cython is not installed (the
    receive loop asks ``cython.compiled``, then of ``stormpy.task.not_compiled``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if python_path is not None:
        env["PYTHONPATH"] = python_path
    script = cwd / "compiled_wordcount.py"
    script.write_text(("import sys\nsys.modules['cython'] = None\n" if without_cython else "") + WORDCOUNT)
    # -P: the script's directory is not put first on sys.path (stormpy comes from python_path)
    proc = subprocess.run([sys.executable, "-P", str(script), json.dumps([MODULES, SENTENCES, ROUNDS])],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["acked"] == ROUNDS * len(SENTENCES)
    assert result["counts"] == expected_counts()
    compiled = all(file.endswith(".so") for file in result["files"].values())
    # what the benchmarks print beside their figures
    assert result["build"] == ("compiled (Cython)" if compiled else "pure Python"), result
    return result["files"]


def build(tmp_path: Path, **env_extra: str) -> tuple[Path, str]:
    """``setup.py build`` of a copy of the checkout; returns the built library tree and stderr."""
    source = tmp_path / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "sparse-venv", "*.egg-info", "build", "dist", "__pycache__", "storm-local", "logs",
        ".venv", "*.so", "docs", "tests", "deploy", "docker"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STORMPY_COMPILE")}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build"], cwd=source, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (lib,) = (source / "build").glob("lib*")
    return lib, proc.stderr


def assert_pure(lib: Path) -> None:
    assert not list(lib.rglob("*.so")), "a pure build holds no extension module"
    assert (lib / "stormpy" / "task" / "tree.py").is_file()


def test_the_tuple_declarations_name_the_slots_of_tuple_py() -> None:
    """``api/tuple.pxd`` declares the C fields of the compiled Tuple; a slot added to
    ``tuple.py`` and not there would exist only interpreted."""
    from stormpy.api.tuple import Tuple

    pxd = (REPO / "stormpy" / "api" / "tuple.pxd").read_text()
    body = pxd.split("cdef class Tuple:", 1)[1].split("cdef class", 1)[0]
    fields = [name.strip() for line in body.splitlines() if line.strip().startswith("cdef public ")
              for name in re.sub(r"^cdef public (object|unsigned long long|double|bint) ", "",
                                 line.strip()).split(",")]
    assert sorted(fields) == sorted(Tuple.__slots__)


def test_default_build_is_pure_python(tmp_path: Path) -> None:
    lib, stderr = build(tmp_path)
    assert "stormpy:" not in stderr   # nothing asked, nothing to explain
    assert_pure(lib)
    files = run_wordcount(str(lib), tmp_path, without_cython=True)
    assert all(Path(f).suffix == ".py" and Path(f).is_relative_to(lib) for f in files.values()), files


def test_no_working_compiler_falls_back_to_pure_python(tmp_path: Path) -> None:
    if importlib.util.find_spec("Cython") is None:
        pytest.skip("Cython is not installed (pip install Cython): the compiler probe is not reached")
    lib, stderr = build(tmp_path, STORMPY_COMPILE="1", CC=str(tmp_path / "no-such-cc"))
    reasons = [line for line in stderr.splitlines() if line.startswith("stormpy:")]
    assert len(reasons) == 1 and "no working C compiler" in reasons[0], stderr[-2000:]
    assert "installing the pure-Python modules" in reasons[0]
    assert_pure(lib)
    run_wordcount(str(lib), tmp_path)


def compiler_available() -> bool:
    return shutil.which(os.environ.get("CC", "cc")) is not None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_compiled_build_imports_the_extensions_and_counts_words(tmp_path: Path) -> None:
    if importlib.util.find_spec("Cython") is None:
        pytest.skip("Cython is not installed (pip install Cython)")
    if not compiler_available():
        pytest.skip("no C compiler on this machine")
    if COMPILED_STEP_PASSED and list(Path(COMPILED_STEP_PASSED).glob("stormpy_streams-*.whl")):
        pytest.skip(f".ci/run's compiled step built {COMPILED_STEP_PASSED} and its word count passed on it")
    lib, stderr = build(tmp_path, STORMPY_COMPILE="1")
    assert "stormpy:" not in stderr, stderr[-2000:]
    files = run_wordcount(str(lib), tmp_path)
    for module, file in files.items():
        assert Path(file).is_relative_to(lib) and file.endswith(".so"), f"{module} imported from {file}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_failed_compile_installs_the_pure_modules(tmp_path: Path) -> None:
    """A compiler that builds the probe but not Cython's C (say, one too old for it)."""
    if importlib.util.find_spec("Cython") is None:
        pytest.skip("Cython is not installed (pip install Cython)")
    real_cc = shutil.which(os.environ.get("CC", "cc"))
    if real_cc is None:
        pytest.skip("no C compiler on this machine")
    cc = tmp_path / "picky-cc"
    cc.write_text(f'#!/bin/sh\ncase "$*" in *probe.c*) exec {real_cc} "$@";; esac\n'
                  'echo "picky-cc: refusing to compile" >&2\nexit 1\n')
    cc.chmod(0o755)
    lib, stderr = build(tmp_path, STORMPY_COMPILE="1", CC=str(cc))
    reasons = [line for line in stderr.splitlines() if line.startswith("stormpy:")]
    assert len(reasons) == 1 and "compiling the tuple path failed" in reasons[0], stderr[-2000:]
    assert_pure(lib)
    files = run_wordcount(str(lib), tmp_path)
    assert all(f.endswith(".py") for f in files.values()), files


def test_installed_stormpy_is_the_compiled_one(tmp_path: Path) -> None:
    if not EXPECT_COMPILED:
        pytest.skip("STORMPY_EXPECT_COMPILED=1 is set by .ci/run for its compiled install only")
    files = run_wordcount(None, tmp_path)
    for module, file in files.items():
        assert file.endswith(".so"), f"{module} imported from {file}, not its compiled extension"
