"""Where Trident keeps coordinator state and spout metas: the TransactionalState interface.

The contract (trident-design.md; helper B builds the real one over ZooKeeper and exposes it as
``context.transactional_state``): ``get(path, default=None)``, ``set(path, value)``,
``delete(path)``, ``children(path)``, JSON values, paths relative to
``<transactional.zookeeper.root>/<topology name>/``.

Until that lands, :class:`_LocalTxState` is an in-process stand-in: one store per topology name
shared by every task of this process. It is right for ``stormpy local`` (one process) and is
the reason a multi-worker cluster cannot yet recover metas written by another worker.

Path helpers live here so every Trident component agrees on the layout:
``coordinator/currtx``, ``coordinator/currattempts``, ``spouts/<stream>/<partition>/<txid>``
(transactional metas), ``spouts/<stream>/<partition>/committed`` (opaque).
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Any, Protocol
from urllib.parse import quote

log = logging.getLogger(__name__)


class TransactionalState(Protocol):
    def get(self, path: str, default: Any = None) -> Any: ...
    def set(self, path: str, value: Any) -> None: ...
    def delete(self, path: str) -> None: ...
    def children(self, path: str) -> list[str]: ...


class _LocalTxState:
    """In-memory TransactionalState of one topology name (values stored as JSON text)."""

    _stores: dict[str, "_LocalTxState"] = {}
    _stores_lock = threading.Lock()

    def __init__(self) -> None:
        self._data: dict[str, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_topology(cls, name: str) -> "_LocalTxState":
        with cls._stores_lock:
            store = cls._stores.get(name)
            if store is None:
                store = cls._stores[name] = cls()
            return store

    @classmethod
    def forget(cls, name: str) -> None:
        """Drop a topology's store (tests run the same name several times)."""
        with cls._stores_lock:
            cls._stores.pop(name, None)

    def get(self, path: str, default: Any = None) -> Any:
        with self._lock:
            text = self._data.get(path.strip("/"))
        return default if text is None else json.loads(text)

    def set(self, path: str, value: Any) -> None:
        text = json.dumps(value)  # JSON, like the ZooKeeper store: a bad value fails here too
        with self._lock:
            self._data[path.strip("/")] = text

    def delete(self, path: str) -> None:
        prefix = path.strip("/") + "/"
        with self._lock:
            self._data.pop(path.strip("/"), None)
            for key in [k for k in self._data if k.startswith(prefix)]:
                del self._data[key]

    def children(self, path: str) -> list[str]:
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        with self._lock:
            names = {k[len(prefix):].split("/", 1)[0] for k in self._data if k.startswith(prefix)}
        return sorted(names)


def transactional_state(context: Any, conf: dict[str, Any]) -> TransactionalState:
    """The task's TransactionalState: the runtime's when it offers one, else the local stand-in."""
    state = getattr(context, "transactional_state", None)
    if state is not None:
        return state
    name = conf.get("topology.name") or getattr(context, "topology_name", "") or "trident"
    return _LocalTxState.for_topology(name)


# ------------------------------------------------------------------ layout
COORDINATOR_CURRENT_TX = "coordinator/currtx"
COORDINATOR_ATTEMPTS = "coordinator/currattempts"


def partition_key(partition: Any) -> str:
    """A path element naming a JSON-able partition id (no '/' survives quoting)."""
    return quote(json.dumps(partition, sort_keys=True), safe="")


def spout_partition_path(stream: str, partition: Any) -> str:
    return f"spouts/{quote(stream, safe='')}/{partition_key(partition)}"


def spout_meta_path(stream: str, partition: Any, txid: int) -> str:
    return f"{spout_partition_path(stream, partition)}/{txid}"


def spout_committed_path(stream: str, partition: Any) -> str:
    return f"{spout_partition_path(stream, partition)}/committed"
