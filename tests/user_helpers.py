"""Test helpers for workers run as other users (``supervisor.run.worker.as.user``): unprivileged
accounts, and the directories above this interpreter and checkout made passable for them while
a test module runs (pyenv under /root, CI's private TMPDIR), restored afterwards."""
from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Directories made passable for other users (o+x) -> their old mode, restored by ``restore_passes``.
_OPENED: dict[Path, int] = {}


def why_not_possible() -> str | None:
    """None when this process can create users and switch to them; else why not."""
    if os.geteuid() != 0:
        return "supervisor.run.worker.as.user needs the test to run as root (it switches users)"
    for tool in ("useradd", "userdel"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: cannot create the unprivileged worker users"
    return None


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def create_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                       check=True, capture_output=True)
        return pwd.getpwnam(name)


def runs_as(account: pwd.struct_passwd) -> str | None:
    """None when ``account`` can run this interpreter and import stormpy; else why not."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        result = subprocess.run([sys.executable, "-c", "import stormpy.worker.worker, kazoo, zmq"],
                                user=account.pw_uid, group=account.pw_gid, extra_groups=[], env=env, cwd="/",
                                capture_output=True, text=True, timeout=60)
    except OSError as exc:
        return str(exc)
    return None if result.returncode == 0 else result.stderr.strip()[-300:]


def let_users_pass(*targets: Path) -> None:
    """Give o+x to the directories above ``targets`` that other users cannot pass (pyenv under
    /root, CI's private TMPDIR); their modes come back with ``restore_passes``."""
    for target in targets:
        resolved = target.resolve()
        # the directories above it, and a directory target itself (a checkout in a 0700 mktemp dir)
        for parent in [*reversed(resolved.parents), *([resolved] if resolved.is_dir() else [])]:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                _OPENED.setdefault(parent, stat.S_IMODE(mode))
                os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)


def let_run_this_interpreter(account: pwd.struct_passwd) -> str | None:
    """Make this interpreter and checkout passable for ``account`` if it cannot run them yet;
    None when it can then, else why not (the caller skips)."""
    if runs_as(account) is not None:
        let_users_pass(Path(sys.executable), Path(sys.prefix), REPO)
    return runs_as(account)


def restore_passes() -> None:
    for path, mode in _OPENED.items():
        with contextlib.suppress(FileNotFoundError):   # a cluster's own directory, gone already
            os.chmod(path, mode)
    _OPENED.clear()
