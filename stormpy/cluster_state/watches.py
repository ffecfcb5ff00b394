"""Persistent watches over one ZooKeeper session: armed, re-armed, delivered on the event thread.

ZooKeeper watches fire once; kazoo drops them when the connection is SUSPENDED; and changes
made while a session was LOST produce no events at all. ``Watches`` hides all three: a watch
registered here calls its callback now, after every change, and once after every
reconnection (so a consumer never misses the state it would have been told about).

Threads: kazoo's watcher callback only queues a re-arm; reading the node and calling the
callback happen on the session's event thread, so callbacks must be quick (hand work to your
own thread) and may call back into the state.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from stormpy.cluster_state.session import ZkSession

log = logging.getLogger(__name__)

_TRANSIENT = (ConnectionLoss, SessionExpiredError, KazooTimeoutError)


class Watch:
    """A registered watch; ``stop()`` ends it (callbacks already queued may still run once)."""

    def __init__(self, registry: "Watches", kind: str, path: str, callback: Callable[[Any], None]) -> None:
        self.registry = registry
        self.kind = kind            # "data" or "children"
        self.path = path
        self.callback = callback
        self.stopped = False
        self.children: dict[str, Watch] = {}

    def on_event(self, event: object) -> None:
        """kazoo watcher: runs on kazoo's callback thread, so only enqueue a re-arm."""
        if not self.stopped:
            self.registry.session.enqueue(lambda: self.registry.arm(self))

    def stop(self) -> None:
        self.stopped = True
        for child in self.children.values():
            child.stop()
        self.registry.forget(self)

    def __repr__(self) -> str:
        return f"Watch({self.kind} {self.path}{' stopped' if self.stopped else ''})"


class Watches:
    """The watches of one session; re-armed after every reconnection."""

    def __init__(self, session: ZkSession) -> None:
        self.session = session
        self._lock = threading.Lock()
        self._watches: list[Watch] = []

    def add(self, kind: str, path: str, callback: Callable[[Any], None]) -> Watch:
        """Register and arm a watch: ``kind`` "data" delivers bytes|None, "children" a sorted list."""
        return self.add_watch(Watch(self, kind, path, callback))

    def add_watch(self, watch: Watch) -> Watch:
        with self._lock:
            self._watches.append(watch)
        if self.session.on_event_thread():
            self.arm(watch)
        else:
            self.session.enqueue(lambda: self.arm(watch))
        return watch

    def forget(self, watch: Watch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def stop_all(self) -> None:
        with self._lock:
            watches, self._watches = self._watches, []
        for watch in watches:
            watch.stopped = True

    def rearm_all(self) -> None:
        """Event thread, after a reconnection: read every watched node again, with a new watcher."""
        with self._lock:
            watches = list(self._watches)
        for watch in watches:
            self.arm(watch)

    def arm(self, watch: Watch) -> None:
        """Event thread: read the node with a watcher set, then deliver the value."""
        if watch.stopped or self.session.closed:
            return
        try:
            value = self._read_watched(watch)
        except _TRANSIENT as exc:
            log.debug("watch on %s not armed (%s); re-armed on reconnect", watch.path, exc)
            return
        if watch.stopped:
            return
        try:
            watch.callback(value)
        except Exception:  # a consumer's bug must not end the event thread
            log.exception("watch callback for %s failed", watch.path)

    def _read_watched(self, watch: Watch) -> Any:
        zk = self.session.zk
        for _ in range(5):  # the node may appear/vanish between our two calls; retry a few times
            try:
                if watch.kind == "children":
                    return sorted(zk.get_children(watch.path, watch=watch.on_event))
                data, _ = zk.get(watch.path, watch=watch.on_event)
                return data
            except NoNodeError:
                if zk.exists(watch.path, watch=watch.on_event) is None:
                    return [] if watch.kind == "children" else None
        return [] if watch.kind == "children" else None
