"""A topology's virtualenv on a supervisor: built with the real pip from wheels shipped with it,
keyed by the requirements' hash, stormpy importable inside, failures as one readable error."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from stormpy.disk_layout import REQUIREMENTS_DIR, REQUIREMENTS_FILE, WHEELS_DIR
from stormpy.supervisor.virtualenvs import READY_MARKER, RequirementsError, Virtualenvs, requirements_key
from stormpy.testing.wheels import build_wheel

PACKAGE = "stormpy-probe-pkg"
MODULE = "stormpy_probe_pkg"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    build_wheel(out, PACKAGE, "1.0")
    build_wheel(out, PACKAGE, "2.0")
    return out


def topology_code(root: Path, requirement: str | None, wheels: Path | None) -> Path:
    """An unpacked code dir as the supervisor sees it after a ``submit -r ... --wheels ...``."""
    code = root / "code"
    code.mkdir(parents=True)
    (code / "topo.py").write_text("# the topology file\n")
    if requirement is not None:
        base = code / REQUIREMENTS_DIR
        base.mkdir()
        (base / REQUIREMENTS_FILE).write_text(requirement + "\n")
        if wheels is not None:
            shutil.copytree(wheels, base / WHEELS_DIR)
    return code


def imported(python: str, code: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                          env=env).stdout.strip()


@pytest.fixture()
def envs(tmp_path: Path) -> Virtualenvs:
    return Virtualenvs({"storm.local.dir": str(tmp_path / "storm-local"), "supervisor.pip.no.index": True,
                        "supervisor.pip.timeout.secs": 120})


def test_key_follows_requirements_and_wheels(tmp_path: Path, wheels: Path) -> None:
    assert requirements_key(topology_code(tmp_path / "none", None, None)) is None
    one = requirements_key(topology_code(tmp_path / "a", f"{PACKAGE}==1.0", wheels))
    same = requirements_key(topology_code(tmp_path / "b", f"{PACKAGE}==1.0", wheels))
    other = requirements_key(topology_code(tmp_path / "c", f"{PACKAGE}==2.0", wheels))
    no_wheels = requirements_key(topology_code(tmp_path / "d", f"{PACKAGE}==1.0", None))
    assert one == same and len({one, other, no_wheels}) == 3


def test_two_pins_get_two_venvs_each_with_its_version_and_stormpy(tmp_path: Path, wheels: Path,
                                                                  envs: Virtualenvs) -> None:
    code1 = topology_code(tmp_path / "t1", f"{PACKAGE}==1.0", wheels)
    code2 = topology_code(tmp_path / "t2", f"{PACKAGE}==2.0", wheels)
    assert not envs.is_ready(code1)
    py1 = envs.ensure("t1-1-1", code1)
    py2 = envs.ensure("t2-2-2", code2)
    assert py1 and py2 and py1 != py2
    assert envs.is_ready(code1) and envs.python_for(code1) == py1
    probe = f"import {MODULE}, stormpy.worker; print({MODULE}.__version__)"
    assert imported(py1, probe) == "1.0"
    assert imported(py2, probe) == "2.0"
    # without PYTHONPATH too: the venv's .pth reaches the supervisor's stormpy and its dependencies
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert imported(py1, f"import zmq, kazoo, {MODULE}, stormpy.worker; print({MODULE}.__version__)", bare) == "1.0"
    # a third topology with the same requirements reuses the venv without running pip
    code3 = topology_code(tmp_path / "t3", f"{PACKAGE}==1.0", wheels)
    assert envs.ensure("t3-3-3", code3) == py1
    envs.remove_unused([requirements_key(code2)])
    assert not envs.is_ready(code1) and envs.is_ready(code2)


def test_no_requirements_means_the_supervisors_python(tmp_path: Path, envs: Virtualenvs) -> None:
    code = topology_code(tmp_path / "plain", None, None)
    assert envs.ensure("plain-1-1", code) is None and envs.python_for(code) is None and envs.is_ready(code)


def test_failed_install_is_one_readable_error_and_leaves_nothing(tmp_path: Path, wheels: Path,
                                                                 envs: Virtualenvs) -> None:
    code = topology_code(tmp_path / "bad", f"{PACKAGE}==3.0", wheels)
    with pytest.raises(RequirementsError) as info:
        envs.ensure("bad-1-1", code)
    message = str(info.value)
    assert "\n" not in message and "pip install" in message and PACKAGE.replace("-", "") in message.replace("-", "")
    key = requirements_key(code)
    assert not (envs.root / key).exists() and not envs.is_ready(code)
    with pytest.raises(RequirementsError):
        envs.python_for(code)


def test_interrupted_build_is_redone(tmp_path: Path, wheels: Path, envs: Virtualenvs) -> None:
    code = topology_code(tmp_path / "t", f"{PACKAGE}==2.0", wheels)
    half = envs.root / requirements_key(code)
    (half / "bin").mkdir(parents=True)          # what a supervisor killed mid-build leaves
    assert not envs.is_ready(code)
    python = envs.ensure("t-1-1", code)
    assert (half / READY_MARKER).exists() and imported(python, f"import {MODULE}; print({MODULE}.__version__)") == "2.0"
