"""Nimbus leader election on ``/leader-lock`` and the check every leader-only write makes.

Storm's rule (DESIGN section 14): several Nimbus daemons may run, only the leader writes
topology state. ``Leadership`` holds the kazoo lock recipe and answers ``is_leader()``; once a
client has competed for leadership (``acquire``), ``check_writer()`` refuses leader-only
writes (StormBase, assignments, topology teardown) unless it is the leader on a connected
session, so a Nimbus that lost the lock cannot overwrite its successor's decisions even
between two monitor rounds. Clients that never compete (supervisors, workers, tools, tests)
are not restricted.

Threads and the race this class exists to close: ``acquire`` runs on Nimbus's main and timer
threads and on the session's event thread (re-acquiring after a session loss), and the LOST
hook runs on kazoo's connection thread. Every read and write of the held lock happens under
``_mutex``, and a generation number, bumped on every LOST, makes an ``acquire`` that was
blocked in ZooKeeper while the session expired throw its now meaningless lock away instead
of installing it after the LOST hook cleared it.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from kazoo.exceptions import KazooException, LockTimeout, NoNodeError

from stormpy import zk_layout
from stormpy.cluster_state.session import ZkSession

log = logging.getLogger(__name__)


class NotLeaderError(RuntimeError):
    """A leader-only write from a client that is not (or no longer) the connected leader."""


class Leadership:
    """The ``/leader-lock`` recipe of one session; see the module docstring for the threads."""

    def __init__(self, session: ZkSession) -> None:
        self.session = session
        self._mutex = threading.Lock()
        self._lock: Any = None               # the kazoo Lock while we hold it; guarded by _mutex
        self._identifier: str | None = None  # who we compete as; None after release
        self._generation = 0                 # bumped on every session loss; guarded by _mutex
        self._competed = False               # once True, leader-only writes are checked
        session.add_lost_hook(self._on_session_lost)
        session.add_reconnected_hook(self._on_reconnected)

    def acquire(self, identifier: str, timeout: float | None = None) -> bool:
        """Take ``/leader-lock`` (blocking up to ``timeout``; None waits forever). True when leader.

        A Nimbus killed with SIGKILL holds the lock until its session expires, so a restarted
        Nimbus waits up to ``storm.zookeeper.session.timeout`` here.
        """
        with self._mutex:
            self._identifier = identifier
            self._competed = True
            if self._lock is not None and self._lock.is_acquired:
                return self.session.is_connected()
            generation = self._generation
        lock = self.session.zk.Lock(zk_layout.LEADER_LOCK, identifier)
        try:
            acquired = bool(lock.acquire(blocking=timeout != 0, timeout=timeout if timeout else None))
        except LockTimeout:
            acquired = False
        if not acquired:
            lock.cancel()
            return False
        with self._mutex:
            stale = generation != self._generation or self._identifier != identifier or self._lock is not None
            if not stale:
                self._lock = lock
        if stale:
            # The session expired (or leadership was released, or another thread won) while we
            # waited: this lock belongs to a dead session or is redundant. Drop it.
            self._release(lock)
            return self.is_leader()
        log.info("acquired leadership as %s", identifier)
        return True

    def current_leader(self) -> str | None:
        """The identifier (``host:port``) holding ``/leader-lock`` now, by anyone's session; None if
        nobody holds it. A SIGKILLed leader stays the holder until its session expires."""
        contenders = self.session.zk.Lock(zk_layout.LEADER_LOCK).contenders()
        return str(contenders[0]) if contenders else None

    def take_over_stale(self, identifier: str, session_id: int) -> bool:
        """Delete lock nodes that ``identifier`` created with the ZooKeeper session ``session_id``,
        which the caller knows is its own dead previous incarnation (see NimbusDaemon): that
        session would otherwise keep the lock until it expires. Other nodes are left alone, so
        a standby already in line is next, as it would be after the expiry. True when one went."""
        if session_id == self.session.session_id:
            return False
        took = False
        for child in self.session.children(zk_layout.LEADER_LOCK):
            path = f"{zk_layout.LEADER_LOCK}/{child}"
            try:
                data, stat = self.session.call(self.session.zk.get, path)
            except NoNodeError:
                continue
            if data.decode(errors="replace") == identifier and stat.ephemeralOwner == session_id:
                self.session.delete(path)
                log.warning("removed %s: the leader lock of this Nimbus's previous incarnation (ZooKeeper "
                            "session 0x%x, not yet expired)", path, session_id)
                took = True
        return took

    def is_leader(self) -> bool:
        """True while this client holds ``/leader-lock`` on a live, connected session."""
        with self._mutex:
            lock = self._lock
        return lock is not None and lock.is_acquired and self.session.is_connected()

    def check_writer(self, what: str) -> None:
        """Raise NotLeaderError unless a client that competes for leadership is the leader now."""
        if self._competed and not self.is_leader():
            state = "not connected to ZooKeeper" if not self.session.is_connected() else "not the leader"
            raise NotLeaderError(f"refusing to {what}: this Nimbus ({self._identifier or 'released'}) is {state}")

    def fence(self, what: str) -> str | None:
        """The path of the lock node this client leads with, for a write to check atomically;
        None for clients that never competed (no check); NotLeaderError when not the leader.

        A leader-only write is one ZooKeeper transaction: "this node still exists" plus the
        write. The node is ephemeral, so once this leader's session ended (and a successor could
        lead) every attempt of the write fails, also one kazoo's retry sends after a reconnection.
        """
        if not self._competed:
            return None
        with self._mutex:
            lock = self._lock
        node = getattr(lock, "node", None)
        if lock is None or node is None or not lock.is_acquired or not self.session.is_connected():
            self.check_writer(what)   # raises with the precise reason
            raise NotLeaderError(f"refusing to {what}: this Nimbus ({self._identifier or 'released'}) "
                                 "is not the leader")
        return f"{lock.path}/{node}"

    def fence_lost(self, what: str, fence: str) -> NotLeaderError:
        return NotLeaderError(f"refusing to {what}: the leadership of this Nimbus "
                              f"({self._identifier or 'released'}) ended (its lock node {fence} is gone); "
                              "its successor's state stands")

    def release(self) -> None:
        """Give up leadership (and stop competing); writes stay refused afterwards."""
        with self._mutex:
            self._identifier = None
            lock, self._lock = self._lock, None
        if lock is not None:
            self._release(lock)

    def _release(self, lock: Any) -> None:
        if not self.session.zk.connected:
            # kazoo would retry the release until ZooKeeper is back, hanging a shutdown; the lock
            # node is ephemeral and goes with this session anyway.
            log.info("not releasing leadership explicitly: ZooKeeper is not connected")
            return
        try:
            lock.release()
        except KazooException as exc:
            log.debug("releasing leadership: %s", exc)

    # ------------------------------------------------------------ session events
    def _on_session_lost(self) -> None:
        """kazoo's connection thread: the lock node died with the session; forget it at once."""
        with self._mutex:
            self._generation += 1
            had, self._lock = self._lock is not None, None
        if had:
            log.warning("leadership lost with the ZooKeeper session")

    def _on_reconnected(self, session_was_lost: bool) -> None:
        """Event thread: after a lost session, compete again (without blocking) as before."""
        with self._mutex:
            identifier = self._identifier
        if session_was_lost and identifier is not None:
            try:
                self.acquire(identifier, timeout=0)
            except KazooException as exc:
                log.warning("could not re-acquire leadership: %s", exc)
