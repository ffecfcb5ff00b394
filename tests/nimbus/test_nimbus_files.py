"""Nimbus's disk side: uploads with server-chosen names and a size cap, safe downloads, expiry."""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from stormpy.nimbus.files import CODE_FILE, NimbusFiles, check_code_archive
from stormpy.nimbus.heartbeats import HeartbeatCache
from stormpy.thrift import storm


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.fixture
def files(tmp_path: Path) -> NimbusFiles:
    return NimbusFiles(tmp_path / "local", max_upload_bytes=1000, stream_expiration_secs=30, clock=Clock())


def upload(files: NimbusFiles, data: bytes) -> str:
    location = files.begin_upload()
    files.upload_chunk(location, data)
    files.finish_upload(location)
    return location


def test_upload_to_stormdist_and_download(files: NimbusFiles, tmp_path: Path) -> None:
    data = make_zip(tmp_path / "code.zip", {"topo.py": b"x = 1\n"}).read_bytes()
    location = upload(files, data)
    assert Path(location).parent == files.inbox
    topology = storm.StormTopology(spouts={}, bolts={}, state_spouts={})
    target = files.setup_stormdist("t-1-1", files.uploaded_file(location), topology, {"a": 1})
    assert sorted(os.listdir(target)) == ["stormcode.zip", "stormconf.json", "stormtopology.ser"]
    assert files.read_topology("t-1-1") == topology and files.stormdist_ids() == ["t-1-1"]
    download = files.begin_download(str(target / CODE_FILE))
    received = b""
    while chunk := files.download_chunk(download):
        received += chunk
    assert received == data
    with pytest.raises(storm.IllegalStateException):
        files.download_chunk(download)  # closed after the end


def test_upload_size_cap_discards_the_upload(files: NimbusFiles) -> None:
    location = files.begin_upload()
    files.upload_chunk(location, b"x" * 600)
    with pytest.raises(storm.IllegalStateException, match="nimbus.file.upload.max.bytes"):
        files.upload_chunk(location, b"x" * 600)
    assert not Path(location).exists()
    with pytest.raises(storm.IllegalStateException, match="unknown or expired"):
        files.upload_chunk(location, b"x")


@pytest.mark.parametrize("location", ["/etc/passwd", "../../x.zip", "", "stormcode-00.zip"])
def test_client_chosen_upload_locations_are_refused(files: NimbusFiles, location: str) -> None:
    with pytest.raises(storm.IllegalStateException):
        files.upload_chunk(location, b"x")
    with pytest.raises(storm.InvalidTopologyException):
        files.uploaded_file(location)


def test_unfinished_upload_cannot_be_submitted(files: NimbusFiles) -> None:
    location = files.begin_upload()
    with pytest.raises(storm.InvalidTopologyException, match="not a finished upload"):
        files.uploaded_file(location)


def test_download_path_tricks_are_refused(files: NimbusFiles, tmp_path: Path) -> None:
    code = files.stormdist("t-1-1")
    code.mkdir(parents=True)
    (code / "stormconf.json").write_text("{}")
    secret = tmp_path / "secret.txt"
    secret.write_text("no")
    (code / "link.txt").symlink_to(secret)
    for bad in [str(secret), str(code / ".." / ".." / "secret.txt"), str(code / "link.txt"), str(code),
                str(code / "missing"), "relative/stormconf.json", "/etc/passwd", "\x00",
                "t-1-1/link.txt", "t-1-1/../../secret.txt", "t-1-1", "../secret.txt"]:
        with pytest.raises(storm.IllegalStateException, match="cannot be downloaded"):
            files.begin_download(bad)
    assert files.begin_download(str(code / "stormconf.json"))
    # "<topology-id>/<file>", relative to stormdist: how standbys and supervisors name code (HA).
    relative = files.begin_download("t-1-1/stormconf.json")
    assert files.download_chunk(relative) == b"{}"


def test_idle_streams_expire(files: NimbusFiles) -> None:
    location = files.begin_upload()
    files._clock.now += 31
    assert files.expire_streams() == 1
    assert not Path(location).exists()


def test_inbox_cleanup_deletes_old_uploads_only(files: NimbusFiles) -> None:
    old = Path(upload(files, b"old"))
    new = Path(upload(files, b"new"))
    os.utime(old, (1000, 1000))
    os.utime(new, (5000, 5000))
    assert files.cleanup_inbox(3600, now=5000) == [old.name]
    assert new.exists() and not old.exists()


@pytest.mark.parametrize("members", [{"../evil.py": b""}, {"/abs.py": b""}, {"a/../../b.py": b""}])
def test_unsafe_archives_are_refused(tmp_path: Path, members: dict[str, bytes]) -> None:
    with pytest.raises(storm.InvalidTopologyException, match="unsafe path"):
        check_code_archive(make_zip(tmp_path / "bad.zip", members))


def test_archive_symlinks_and_non_zips_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "link.zip"
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo("link")
        info.external_attr = (0o120777 << 16)
        archive.writestr(info, "/etc/passwd")
    with pytest.raises(storm.InvalidTopologyException, match="symlink"):
        check_code_archive(path)
    (tmp_path / "junk.zip").write_bytes(os.urandom(100))
    with pytest.raises(storm.InvalidTopologyException, match="not a zip"):
        check_code_archive(tmp_path / "junk.zip")


# ---------------------------------------------------------------- heartbeat cache (pure)
def beat(time_secs: int, executors: list[tuple[int, int]]) -> storm.ClusterWorkerHeartbeat:
    stats = {storm.ExecutorInfo(task_start=s, task_end=e): storm.ExecutorStats(
        emitted={}, transferred={}, specific=storm.ExecutorSpecificStats(
            bolt=storm.BoltStats(acked={}, failed={}, process_ms_avg={}))) for s, e in executors}
    return storm.ClusterWorkerHeartbeat(storm_id="t", executor_stats=stats, time_secs=time_secs, uptime_secs=1)


def assignment(start_secs: int) -> storm.Assignment:
    infos = {storm.ExecutorInfo(task_start=1, task_end=1): storm.NodeInfo(node="n1", port={1}),
             storm.ExecutorInfo(task_start=2, task_end=2): storm.NodeInfo(node="n2", port={1})}
    return storm.Assignment(master_code_dir="/x", node_host={}, executor_node_port=infos,
                            executor_start_time_secs={i: start_secs for i in infos})


def test_heartbeat_cache_uses_nimbus_clock_not_reported_time() -> None:
    """A worker whose clock is far off is alive as long as its reported time keeps changing."""
    cache = HeartbeatCache()
    slots = {(1, 1): ("n1", 1), (2, 2): ("n2", 1)}
    a = assignment(start_secs=0)
    for step, now in enumerate([0.0, 2.0, 4.0, 6.0]):
        # n1 reports a time in 1970 that changes; n2 is stuck at a "future" time that never changes
        cache.update("t", slots, {("n1", 1): beat(10 + step, [(1, 1)]), ("n2", 1): beat(10**10, [(2, 2)])}, now)
    alive = cache.alive_executors("t", a, now=6.0, now_secs=10**6, timeout_secs=5, launch_secs=1)
    assert alive == {(1, 1)}


def test_heartbeat_cache_launch_grace_and_never_seen() -> None:
    cache = HeartbeatCache()
    slots = {(1, 1): ("n1", 1), (2, 2): ("n2", 1)}
    cache.update("t", slots, {}, now=0.0)
    a = assignment(start_secs=100)
    assert cache.alive_executors("t", a, now=10.0, now_secs=105, timeout_secs=5, launch_secs=30) == {(1, 1), (2, 2)}
    assert cache.alive_executors("t", a, now=10.0, now_secs=200, timeout_secs=5, launch_secs=30) == set()
    assert cache.alive_executors("t", a, now=4.0, now_secs=200, timeout_secs=5, launch_secs=30) == {(1, 1), (2, 2)}


def test_heartbeat_from_wrong_slot_does_not_count() -> None:
    cache = HeartbeatCache()
    slots = {(1, 1): ("n1", 1)}
    cache.update("t", slots, {}, now=0.0)
    cache.update("t", slots, {("n9", 1): beat(5, [(1, 1)])}, now=4.0)
    assert cache.is_timed_out("t", (1, 1), now=6.0, timeout_secs=5)


def test_stored_topology_conf_is_private(files: NimbusFiles, tmp_path: Path) -> None:
    """Issue 26 item 8: a topology's conf can carry credentials; only Nimbus's user reads it."""
    import stat

    from stormpy.disk_layout import write_private

    old = os.umask(0o022)   # the usual umask: files would be 0644 without care
    try:
        location = upload(files, make_zip(tmp_path / "code.zip", {"topo.py": b"x = 1\n"}).read_bytes())
        conf = {"topology.environment": {"DB_PASSWORD": "hunter22"}}
        target = files.setup_stormdist("t-1-1", files.uploaded_file(location), storm.StormTopology(
            spouts={}, bolts={}, state_spouts={}), conf)
        assert stat.S_IMODE(target.stat().st_mode) == 0o700
        assert stat.S_IMODE((target / "stormconf.json").stat().st_mode) == 0o600
        assert files.read_conf_json("t-1-1") and "hunter22" in files.read_conf_json("t-1-1")
        loose = tmp_path / "loose.json"
        loose.write_text("{}")
        os.chmod(loose, 0o644)
        write_private(loose, '{"storm.zookeeper.auth.payload": "u:p"}')   # an existing file, too
        assert stat.S_IMODE(loose.stat().st_mode) == 0o600
    finally:
        os.umask(old)
