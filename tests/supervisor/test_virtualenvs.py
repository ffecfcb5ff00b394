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


def test_a_wheel_named_by_path_resolves_in_the_code_directory(tmp_path: Path, wheels: Path,
                                                             envs: Virtualenvs) -> None:
    code = topology_code(tmp_path / "paths", f"./vendored/{MODULE}-1.0-py3-none-any.whl", None)
    shutil.copytree(wheels, code / "vendored")           # shipped as part of the topology's directory
    python = envs.ensure("paths-1-1", code)
    assert imported(python, f"import {MODULE}; print({MODULE}.__version__)") == "1.0"


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


# ---------------------------------------------------------------- the sync thread's side

def test_failed_install_is_reported_backs_off_and_clears_when_it_succeeds(zk_conf, tmp_path: Path,
                                                                         wheels: Path) -> None:
    """Syncer over a real ZooKeeper: a failure becomes an error of ``__requirements`` (what Nimbus
    turns into sched_status), no pip run during the back-off, the error goes once it installs."""
    from stormpy.cluster_state import ClusterState
    from stormpy.streams import REQUIREMENTS_COMPONENT
    from stormpy.supervisor import localstate
    from stormpy.supervisor.sync import Syncer

    local = tmp_path / "storm-local"
    conf = {**zk_conf, "storm.local.dir": str(local), "supervisor.pip.no.index": True,
            "supervisor.pip.retry.secs": 30, "storm.local.hostname": "10.9.8.7"}
    topology_id = "probe-1-1"
    code = topology_code(localstate.stormdist_dir(local, topology_id), f"{PACKAGE}==3.0", wheels)
    (code.parent / "stormconf.json").write_text("{}")
    now = [1000.0]
    with ClusterState(conf) as state:
        syncer = Syncer(conf, state, "sup-1", [6700], localstate.LocalState(local), connect_nimbus=None)
        syncer.clock = lambda: now[0]
        assert syncer.code_downloaded(topology_id) and not syncer.code_ready(topology_id)
        syncer.install_requirements(topology_id)
        errors = state.component_errors(topology_id, REQUIREMENTS_COMPONENT)
        assert len(errors) == 1 and errors[0].host == "10.9.8.7"
        assert errors[0].error.startswith("requirements not installed on 10.9.8.7: pip install -r requirements.txt failed")
        assert not syncer.code_ready(topology_id) and syncer.worker_python(topology_id) is None
        now[0] += 10                                     # inside supervisor.pip.retry.secs: no new attempt
        syncer.install_requirements(topology_id)
        assert len(state.component_errors(topology_id, REQUIREMENTS_COMPONENT)) == 1
        now[0] += 25                                     # past it, and the pin now has a wheel
        (code / REQUIREMENTS_DIR / REQUIREMENTS_FILE).write_text(f"{PACKAGE}==2.0\n")
        syncer.virtualenvs.forget(code)
        syncer.install_requirements(topology_id)
        assert state.component_errors(topology_id, REQUIREMENTS_COMPONENT) == []
        assert syncer.code_ready(topology_id)
        python = syncer.worker_python(topology_id)
        assert imported(python, f"import {MODULE}; print({MODULE}.__version__)") == "2.0"
        syncer.remove_stale_code(keep=set())             # the topology left: its code and venv go
        assert not localstate.stormdist_dir(local, topology_id).exists() and not list(syncer.virtualenvs.root.iterdir())
