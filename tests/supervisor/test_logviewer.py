"""The supervisor's log viewer (real HTTP server), log retention and worker log rotation."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from stormpy.supervisor.logviewer import LogCleaner, LogViewer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def viewer(tmp_path: Path):
    log_dir = tmp_path / "logs"
    worker = log_dir / "workers-artifacts" / "wc-1-1" / "6700"
    worker.mkdir(parents=True)
    (worker / "worker.log").write_text("".join(f"line {i}\n" for i in range(1000)))
    (tmp_path / "secret.txt").write_text("not for you\n")
    (worker / "escape.log").symlink_to(tmp_path / "secret.txt")
    server = LogViewer(log_dir, 0, host="127.0.0.1").start()
    try:
        yield server
    finally:
        server.stop("test finished")


def get(port: int, query: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/log?{query}", timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_tail_and_range_reads(viewer: LogViewer) -> None:
    status, headers, body = get(viewer.port, "file=wc-1-1/6700/worker.log&length=18")
    assert status == 200 and body == "line 998\nline 999\n"
    size = int(headers["X-Log-Size"])
    assert int(headers["X-Log-Start"]) == size - 18
    status, headers, body = get(viewer.port, "file=wc-1-1/6700/worker.log&start=0&length=14")
    assert (status, body, headers["X-Log-Start"]) == (200, "line 0\nline 1\n", "0")


@pytest.mark.parametrize("name,status", [("../../secret.txt", 404), ("wc-1-1/../../../secret.txt", 404),
                                         ("/etc/passwd", 400), ("wc-1-1/6700/escape.log", 404),
                                         ("wc-1-1/6700", 404), ("nope/1/worker.log", 404), ("", 400)])
def test_nothing_outside_workers_artifacts_can_be_read(viewer: LogViewer, name: str, status: int) -> None:
    code, _, body = get(viewer.port, f"file={urllib.request.quote(name)}")
    assert code == status
    assert "not for you" not in body and "root:" not in body


def test_cleaner_deletes_logs_of_gone_topologies_after_the_age(tmp_path: Path) -> None:
    root = tmp_path / "workers-artifacts"
    for topo in ("alive-1-1", "gone-old-1-1", "gone-new-1-1"):
        (root / topo / "6700").mkdir(parents=True)
        (root / topo / "6700" / "worker.log").write_text("x\n")
    old = time.time() - 3600
    os.utime(root / "gone-old-1-1" / "6700" / "worker.log", (old, old))
    os.utime(root / "alive-1-1" / "6700" / "worker.log", (old, old))
    cleaner = LogCleaner(tmp_path, age_secs=600, live_topologies=lambda: ["alive-1-1"])
    assert cleaner.clean_once() == ["gone-old-1-1"]
    assert sorted(p.name for p in root.iterdir()) == ["alive-1-1", "gone-new-1-1"]


def test_supervised_worker_log_rotates_and_print_goes_to_it(tmp_path: Path) -> None:
    """The worker's own logging set-up, run as the supervisor runs it (stderr = worker.log.out)."""
    log_dir = tmp_path / "logs"
    folder = log_dir / "workers-artifacts" / "t-1-1" / "6700"
    folder.mkdir(parents=True)
    code = ("import logging, sys; from stormpy import config as C; from stormpy.worker.__main__ import _setup_logging; "
            f"_setup_logging(C.Config({{'storm.log.dir': {str(log_dir)!r}, 'worker.log.max.bytes': 4000}}), 't-1-1', 6700); "
            "[logging.getLogger('chatty').info('logged line %d', i) for i in range(600)]; "
            "[print('printed line', i) for i in range(3)]")
    with open(folder / "worker.log.out", "ab") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT, check=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["worker.log", "worker.log.1", "worker.log.2", "worker.log.3", "worker.log.4", "worker.log.5",
                     "worker.log.out"]
    assert all((folder / f).stat().st_size <= 4200 for f in files if f != "worker.log.out")
    assert (folder / "worker.log.out").stat().st_size == 0
    newest = (folder / "worker.log").read_text()
    assert "logged line 599" in newest and "INFO STDOUT [MainThread] printed line 2" in newest


def test_with_login_on_the_log_viewer_needs_the_ui_login_or_a_signed_request(tmp_path: Path) -> None:
    """Issue 26 item 8: the UI's users file and check; ``stormpy logs`` signs with the secret."""
    import base64

    from stormpy.auth import set_user_password
    from stormpy.client.ops import fetch
    from stormpy.errors import UserError
    from stormpy.supervisor.logviewer import LogAccess

    worker = tmp_path / "logs" / "workers-artifacts" / "wc-1-1" / "6700"
    worker.mkdir(parents=True)
    (worker / "worker.log").write_text("a private log line\n")
    secret_file = tmp_path / "secret"
    secret_file.write_text("the-cluster-master-secret-0123456789\n")
    secret_file.chmod(0o600)
    users = tmp_path / "ui-users"
    set_user_password(users, "ops", "ui-password-77")
    conf = {"storm.thrift.auth.secret.file": str(secret_file), "ui.users.file": str(users)}
    server = LogViewer(tmp_path / "logs", 0, host="127.0.0.1", access=LogAccess.from_conf(conf)).start()
    url = f"http://127.0.0.1:{server.port}/api/v1/log?file=wc-1-1/6700/worker.log"

    def status(headers: dict[str, str]) -> tuple[int, dict[str, str]]:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
                return resp.status, dict(resp.headers)
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, dict(exc.headers)

    def basic(raw: bytes) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(raw).decode()}

    try:
        code, headers = status({})
        assert code == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert status(basic(b"ops:wrong-password"))[0] == 401
        assert status(basic(b"ops:" + secret_file.read_bytes().strip()))[0] == 401   # not a password
        assert status(basic(b"ops:ui-password-77"))[0] == 200
        secret = secret_file.read_bytes().strip()
        got = fetch("127.0.0.1", server.port, "wc-1-1/6700/worker.log", None, 100, secret)
        assert got is not None and got[2] == b"a private log line\n"
        with pytest.raises(UserError, match="answered 401"):
            fetch("127.0.0.1", server.port, "wc-1-1/6700/worker.log", None, 100)
        with pytest.raises(UserError, match="answered 401"):     # signed with another secret
            fetch("127.0.0.1", server.port, "wc-1-1/6700/worker.log", None, 100, b"another-secret-0123456789")
    finally:
        server.stop("test finished")
    with pytest.raises(UserError, match="log viewer needs a login because ui.auth.enable is on"):
        LogAccess.from_conf({"ui.auth.enable": True})
