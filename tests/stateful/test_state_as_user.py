"""A stateful bolt's default sqlite file when workers run as their submitters
(``supervisor.run.worker.as.user``): such a worker starts in its own worker directory, which the
supervisor removes with it, so a file there (the relative default ``storm-local/state/``) did
not outlive a restart. The file is kept in the supervisor's directory under the user's name
instead, made the user's by the supervisor's launcher; a restarted worker (a new worker id, a new
working directory) reads what the last one committed.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormpy import disk_layout
from stormpy.supervisor.launcher import Launcher
from tests.user_helpers import create_user, exists, let_run_this_interpreter, restore_passes, why_not_possible

REPO = Path(__file__).resolve().parents[2]
USER = "stormpy-test-state"

# One worker's life: the host directory as Worker.__init__ sets it, the state as a stateful bolt
# opens it (the topology's config: no storm.local.dir), one committed transaction.
LIFE = """
import sys
from stormpy import disk_layout
from stormpy.stateful.state import default_sqlite_path, open_state
disk_layout.set_host_local_dir(sys.argv[1])
conf = {"topology.state.provider": "sqlite"}
state = open_state(conf, "count-3")
seen = state.get("n", 0)
state.put("n", seen + 1)
state.prepare_commit(seen + 1)
state.commit(seen + 1)
state.close()
print(seen, default_sqlite_path(conf))
"""


@pytest.fixture
def account() -> Iterator[pwd.struct_passwd]:
    reason = why_not_possible()
    if reason:
        pytest.skip(f"skipped: {reason}")
    created = not exists(USER)
    user = create_user(USER)
    try:
        problem = let_run_this_interpreter(user)
        if problem is not None:
            pytest.skip(f"skipped: user {USER} cannot run this interpreter: {problem}")
        yield user
    finally:
        restore_passes()
        if created:
            subprocess.run(["userdel", USER], capture_output=True)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """Under /tmp, passable by the worker's user (pytest's own temp dirs are root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="stormpy-state-as-user-", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _launch(launcher: Launcher, worker_id: str) -> Path:
    """What the supervisor does for a worker run as USER (python is /bin/true: no worker runs)."""
    pid = launcher.launch("topo-1", 6700, worker_id, topology_conf={"topology.submitter.user": USER},
                          python="/bin/true")
    launcher._children[pid].wait()
    return disk_layout.worker_dir(launcher.local_dir, worker_id)


def test_a_restarted_worker_run_as_its_user_reads_the_last_ones_state(account: pwd.struct_passwd,
                                                                      scratch: Path) -> None:
    local = scratch / "local"
    disk_layout.stormdist_dir(local, "topo-1").mkdir(parents=True)      # the topology's code, lent
    launcher = Launcher({"storm.local.dir": str(local), "storm.log.dir": str(scratch / "logs"),
                         "supervisor.run.worker.as.user": True}, "sup-1")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    seen = []
    for worker_id in ("worker-1", "worker-2"):
        cwd = _launch(launcher, worker_id)
        life = subprocess.run([sys.executable, "-c", LIFE, str(local)], user=account.pw_uid, group=account.pw_gid,
                              extra_groups=[], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
        assert life.returncode == 0, life.stderr
        count, path = life.stdout.split()
        seen.append(int(count))
        assert Path(path) == disk_layout.user_state_dir(local, USER) / "kv_state.db"
        assert Path(path).stat().st_uid == account.pw_uid
        disk_layout.remove_worker_dir(local, worker_id)     # as the supervisor does with a dead worker
    assert seen == [0, 1], "the second worker did not read what the first one committed"
