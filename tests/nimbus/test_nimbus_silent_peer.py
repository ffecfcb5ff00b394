"""A Nimbus peer that stops answering holds a standby for a session timeout at most, not a minute.

When the leader's host is cut off the network in the middle of a standby's code copy, the TCP
connection stays open and nothing comes back. Here the "leader" is a real listening socket that
accepts and reads but never answers (what the standby sees of a cut-off host), holding
``/leader-lock`` and its ``/nimbuses`` registration in the real ZooKeeper through a session of
its own. The standby's copy must give up within ``peer_timeout_secs`` (the ZooKeeper session
timeout), and once the silent leader's session ends the standby must lead at once, not after
``nimbus.code.sync.freq.secs``.
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy.cluster_state import ClusterState
from stormpy.nimbus.files import CODE_FILE, CONF_FILE, TOPOLOGY_FILE, NimbusFiles
from stormpy.nimbus.ha import CodeReplicator, LeaderElector, peer_timeout_secs
from stormpy.nimbus.server import nimbus_summary
from stormpy.testing import wait_until
from stormpy.thrift import storm

pytestmark = pytest.mark.timeout(120)

SESSION_MS = 2000
STANDBY = "127.0.0.1:1"   # never dialled: nobody asks the standby for anything here


class SilentPeer:
    """Accepts connections and reads what comes, never answers; records when each connection
    opened and when the client closed it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.opened: list[float] = []
        self.closed: list[float] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.opened.append(time.monotonic())
            thread = threading.Thread(target=self._swallow, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _swallow(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        with conn:
            while not self._stop.is_set():
                try:
                    if not conn.recv(65536):
                        break
                except socket.timeout:
                    continue
                except OSError:
                    break
            self.closed.append(time.monotonic())

    def held_secs(self) -> list[float]:
        return [end - start for start, end in zip(self.opened, self.closed)]

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        self.sock.close()


@pytest.fixture
def session_ms() -> int:
    """storm.zookeeper.session.timeout (so also the peer timeout); a test may parametrize it."""
    return SESSION_MS


@pytest.fixture
def conf(zk_conf: dict[str, Any], session_ms: int) -> dict[str, Any]:
    return {**zk_conf, "storm.zookeeper.session.timeout": session_ms}


@pytest.fixture
def silent() -> Iterator[SilentPeer]:
    peer = SilentPeer()
    try:
        yield peer
    finally:
        peer.close()


@pytest.fixture
def silent_leader(conf: dict[str, Any], silent: SilentPeer) -> Iterator[ClusterState]:
    """The silent peer leads: it holds /leader-lock, is registered, and two topologies are live."""
    state = ClusterState(conf)
    try:
        assert state.acquire_leadership(silent.host_port, timeout=10)
        state.register_nimbus(silent.host_port, nimbus_summary("127.0.0.1", silent.port, 0, True))
        for topology_id in ("wc-1-1", "wc-2-2"):
            state.set_storm_base(topology_id, storm.StormBase(name=topology_id, status=storm.TopologyStatus.ACTIVE,
                                                              num_workers=1, launch_time_secs=1))
        yield state
    finally:
        state.close()


@pytest.fixture
def standby_state(conf: dict[str, Any]) -> Iterator[ClusterState]:
    state = ClusterState(conf)
    try:
        yield state
    finally:
        state.close()


def _files(tmp_path: Path) -> NimbusFiles:
    return NimbusFiles(tmp_path / "standby", max_upload_bytes=1 << 20, stream_expiration_secs=60)


def test_the_peer_timeout_is_the_session_timeout_at_most_a_minute() -> None:
    assert peer_timeout_secs({"storm.zookeeper.session.timeout": 6000}) == 6.0
    assert peer_timeout_secs({}) == 20.0                      # the key's default, 20 s
    assert peer_timeout_secs({"storm.zookeeper.session.timeout": 600_000}) == 60.0


def test_a_code_copy_from_a_silent_leader_gives_up_within_the_session_timeout(
        conf: dict[str, Any], silent: SilentPeer, silent_leader: ClusterState, standby_state: ClusterState,
        tmp_path: Path) -> None:
    bound = peer_timeout_secs(conf)
    files = _files(tmp_path)
    replicator = CodeReplicator(standby_state, files, STANDBY, peer_timeout_secs=bound)
    assert replicator.missing_code() == ["wc-1-1", "wc-2-2"]
    started = time.monotonic()
    assert replicator.sync_once() == []
    elapsed = time.monotonic() - started
    # One wait for the whole round: the second topology does not wait again on the dead connection
    # (a second wait would take 2 x bound: the margin stays below one bound).
    assert elapsed < bound + 1.5, f"the copy waited {elapsed:.1f}s on a silent leader (bound {bound:.0f}s)"
    wait_until(lambda: len(silent.closed) == len(silent.opened) == 1, 5, "the standby to close its one connection")
    assert list(files.stormdist_root.iterdir()) == [], "no half-copied code is left behind"


def test_offering_code_to_a_silent_nimbus_gives_up_within_the_session_timeout(
        conf: dict[str, Any], silent: SilentPeer, silent_leader: ClusterState, standby_state: ClusterState,
        tmp_path: Path) -> None:
    bound = peer_timeout_secs(conf)
    files = _files(tmp_path)
    for name in (CODE_FILE, TOPOLOGY_FILE, CONF_FILE):
        (files.stormdist_root / "wc-1-1").mkdir(exist_ok=True)
        (files.stormdist_root / "wc-1-1" / name).write_bytes(b"x" * 100)
    silent_leader.set_code_request(silent.host_port, ["wc-1-1"])
    replicator = CodeReplicator(standby_state, files, STANDBY, peer_timeout_secs=bound)
    started = time.monotonic()
    assert replicator.offer_to_peers() == []
    elapsed = time.monotonic() - started
    assert elapsed < bound + 1.5, f"the offer waited {elapsed:.1f}s on a silent Nimbus (bound {bound:.0f}s)"


# With the short sync period the leader's session ends PAUSE_SECS after the failed copy: past the
# 0.5 s after which a standby that did not wait for the session would dial the silent leader again,
# well before the peer timeout (4 s here) after which the standby dials it again by design.
PAUSE_SECS = 1.25


@pytest.mark.parametrize(("sync_secs", "session_ms"), [(120, SESSION_MS), (0.5, 4000)])
def test_a_standby_whose_copy_failed_leads_as_soon_as_the_silent_leaders_session_ends(
        conf: dict[str, Any], silent: SilentPeer, silent_leader: ClusterState, standby_state: ClusterState,
        tmp_path: Path, sync_secs: float) -> None:
    """The copy fails first (within the bound), then the standby waits for code because the
    leader is still registered; the leader's session then ends (a cut-off host's session
    expires). The standby, the only Nimbus left, leads within seconds: not after the 120 s sync
    period it waits for code with, and with a short sync period not after blocking on the silent
    leader a second time (it gives the leader's session the time to end first)."""
    bound = peer_timeout_secs(conf)
    replicator = CodeReplicator(standby_state, _files(tmp_path), STANDBY, peer_timeout_secs=bound)
    led = threading.Event()
    stop = threading.Event()
    elector = LeaderElector(standby_state, replicator, STANDBY, sync_secs, on_leader=led.set,
                            on_standby=lambda: None, stop_event=stop)
    elector.start()
    try:
        wait_until(lambda: silent.closed, bound + 5, "the standby to give up its copy from the silent leader")
        assert silent.held_secs()[0] < bound + 1.5
        # the standby now waits for the code (the leader is registered); timed from the failed copy
        time.sleep(max(0.0, silent.closed[0] + PAUSE_SECS - time.monotonic()))
        assert not led.is_set()
        silent_leader.close()                # its session ends: lock node and registration go
        ended = time.monotonic()
        assert led.wait(15), "the standby did not lead within 15 s of the leader's session ending"
        print(f"the standby led {time.monotonic() - ended:.1f}s after the silent leader's session ended")
        assert elector.leading and standby_state.leader() == STANDBY
        assert len(silent.opened) == 1, "the standby dialled the silent leader again instead of waiting for its session"
    finally:
        stop.set()
        elector.join(10)
