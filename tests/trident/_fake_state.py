"""A MINIMAL in-memory transactional map for Trident tests until the real state layer
(stormpy.trident.state, helper D) is merged; it follows the C/D contract in
notes/trident-design.md: begin_commit/commit, multi_get, multi_update, multi_put; stores
[txid, value] per key, so a replayed txid keeps the value it already wrote.
"""
from __future__ import annotations

import threading
from typing import Any

_STORES: dict[str, dict[tuple, list]] = {}
_LOCK = threading.Lock()


class FakeTransactionalMap:
    def __init__(self, store: dict[tuple, list]) -> None:
        self.store = store
        self.txid: int | None = None

    def begin_commit(self, txid: int) -> None:
        self.txid = txid

    def commit(self, txid: int) -> None:
        self.txid = None

    def multi_get(self, keys: list[tuple]) -> list[Any]:
        with _LOCK:
            return [self.store[tuple(k)][1] if tuple(k) in self.store else None for k in keys]

    def multi_update(self, keys: list[tuple], updaters: list) -> list[Any]:
        result = []
        with _LOCK:
            for key, update in zip(keys, updaters):
                key = tuple(key)
                stored = self.store.get(key)
                if stored is not None and stored[0] == self.txid:
                    result.append(stored[1])   # this txid was applied by an earlier attempt
                    continue
                value = update(None if stored is None else stored[1])
                self.store[key] = [self.txid, value]
                result.append(value)
        return result

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        with _LOCK:
            for key, value in zip(keys, values):
                self.store[tuple(key)] = [self.txid, value]


class FakeMapFactory:
    def __init__(self, name: str) -> None:
        self.name = name

    def _store(self) -> dict[tuple, list]:
        with _LOCK:
            return _STORES.setdefault(self.name, {})

    def make_state(self, conf: Any, context: Any, partition_index: int, num_partitions: int) -> FakeTransactionalMap:
        return FakeTransactionalMap(self._store())

    def open_map(self) -> FakeTransactionalMap:
        return FakeTransactionalMap(self._store())

    def items(self) -> dict[tuple, Any]:
        store = self._store()
        with _LOCK:
            return {k: v[1] for k, v in store.items()}


def fake_transactional(name: str) -> FakeMapFactory:
    with _LOCK:
        _STORES.pop(name, None)
    return FakeMapFactory(name)
