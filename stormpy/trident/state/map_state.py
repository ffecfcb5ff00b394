"""Trident map states: the MapState contract and the three map wrappers over a BackingMap.

A Trident committer (a processing bolt that persists) owns one ``State`` per partition. When the
master batch coordinator says ``$commit`` for txid N, the committer calls
``state.begin_commit(N)``, applies the batch's updates, then ``state.commit(N)``. A batch can be
committed more than once (the commit failed or timed out after some writes landed), so what a
map state stores next to each value decides what a replay does:

- ``TransactionalMap`` stores ``[txid, value]``. A key whose stored txid is the current txid
  was already updated by an earlier attempt of this very batch: the stored value stands. Exact
  with a transactional spout (a txid always carries the same tuples).
- ``OpaqueMap`` stores ``[txid, prev, curr]``. A key whose stored txid is the current txid is
  recomputed from ``prev`` (the value before this txid), so a replay carrying *different* tuples
  replaces the earlier attempt's effect. Exact with an opaque spout too.
  A replay may also carry FEWER keys: a key only the earlier attempt touched would keep that
  attempt's effect and count its tuples twice when they come again in a later batch. So each
  partition of an opaque state keeps a commit log under a reserved key (``OPAQUE_LOG_KEY``,
  partition, partitions): ``{"txid": N, "keys": [...]}``, written in the same ``multi_put`` as the
  values (before them), holding every key any attempt of N wrote; at the commit of a replayed N
  the keys of the log that this attempt did not write are put back to their value before N.
- ``NonTransactionalMap`` stores the bare value: a replay applies again (at-least-once).

Transactional and opaque maps over a backing map with ``fencing = True`` (Memory, SQLite, Redis)
also keep an owner and a per-partition fence record: :mod:`stormpy.trident.state.fence`.

After any failed write (``multi_put`` raised: the write may or may not have landed, e.g. a Redis
timeout after MSET), the state reloads the fence record and the opaque commit log from the store
before its next write, so the replay that follows reverts exactly what landed.

The wrappers are pure logic over a ``BackingMap`` (raw ``multi_get`` / ``multi_put`` of stored
values), so one backend (memory, SQLite, Redis, or the user's own) serves all three kinds. The
wrappers are called from one thread: the executor thread of the task that owns the partition.
Keys are tuples of the group-by values; backends store them as JSON lists.
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from stormpy import config as cfg
from stormpy.trident.state.backing import BackingMaker
from stormpy.trident.state.contract import (KINDS, NON_TRANSACTIONAL, OPAQUE, OPAQUE_LOG_KEY, TRANSACTIONAL,
                                            BackingMap, State, StateFactory, StateFencedError, is_reserved_key)
from stormpy.trident.state.fence import Fence, supports_fencing

log = logging.getLogger(__name__)


class MapState(State):
    """A keyed state: logical values in and out; the stored layout is the wrapper's business."""

    def __init__(self, backing: BackingMap, fence: "Fence | None" = None) -> None:
        self.backing = backing
        self.fence = fence
        self._txid: int | None = None

    def begin_commit(self, txid: int) -> None:
        if self.fence is not None:
            self.fence.begin(txid)
        self._txid = txid

    def _put(self, keys: list[tuple], values: list[Any]) -> None:
        """Write stored values: fenced when the state has a fence, else a plain ``multi_put``."""
        if self.fence is not None:
            self.fence.put(keys, values, self._current_txid("multi_put"))
        else:
            self.backing.multi_put(keys, values)

    def commit(self, txid: int) -> None:
        self._txid = None

    def close(self) -> None:
        self.backing.close()

    def multi_get(self, keys: list[tuple]) -> list[Any]:
        """The logical value of each key, ``None`` where absent."""
        return [None if raw is None else self._logical(raw) for raw in self.backing.multi_get(_keys(keys))]

    def multi_update(self, keys: list[tuple], updaters: list[Callable[[Any], Any]]) -> list[Any]:
        """Apply ``updater(old_value_or_None) -> new_value`` per key; returns the new values."""
        raise NotImplementedError

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        """Set each key's logical value (replacing, not combining)."""
        raise NotImplementedError

    def items(self) -> Iterator[tuple[tuple, Any]]:
        """Every (key tuple, logical value) of the backing map, if it can list its keys."""
        for key, raw in self.backing.items():
            if is_reserved_key(key):
                continue
            yield key, self._logical(raw)

    def _logical(self, raw: Any) -> Any:
        return raw

    def _current_txid(self, what: str) -> int:
        if self._txid is None:
            raise RuntimeError(f"{type(self).__name__}.{what}() outside a commit: call begin_commit(txid) first")
        return self._txid


class TransactionalMap(MapState):
    """Stores ``[txid, value]``; a key already written by the current txid keeps its value."""

    def _logical(self, raw: Any) -> Any:
        return raw[1]

    def multi_update(self, keys: list[tuple], updaters: list[Callable[[Any], Any]]) -> list[Any]:
        txid = self._current_txid("multi_update")
        keys = _keys(keys)
        _check_lengths(keys, updaters, "updaters")
        results: list[Any] = []
        put_keys: list[tuple] = []
        put_values: list[Any] = []
        for key, raw, updater in zip(keys, self.backing.multi_get(keys), updaters):
            if raw is not None and raw[0] > txid:
                raise _newer_txid(self, key, raw[0], txid)
            if raw is not None and raw[0] == txid:
                # An earlier attempt of this txid already applied the update: the same txid carries
                # the same tuples (transactional spout), so applying it again would double count.
                results.append(raw[1])
                continue
            value = updater(None if raw is None else raw[1])
            results.append(value)
            put_keys.append(key)
            put_values.append([txid, value])
        if put_keys:
            self._put(put_keys, put_values)
        return results

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        txid = self._current_txid("multi_put")
        keys = _keys(keys)
        _check_lengths(keys, values, "values")
        if self.fence is None:
            # No partition record to tell a replay from a restart: at least never go backwards per key.
            for key, raw in zip(keys, self.backing.multi_get(keys)):
                if raw is not None and raw[0] > txid:
                    raise _newer_txid(self, key, raw[0], txid)
        self._put(keys, [[txid, v] for v in values])


class OpaqueMap(MapState):
    """Stores ``[txid, prev, curr]``; a key already written by the current txid is redone from prev.

    ``partition`` (index, count) turns on the commit log (see the module docstring); None (a map
    opened outside a topology) has none.
    """

    def __init__(self, backing: BackingMap, partition: tuple[int, int] | None = None,
                 fence: "Fence | None" = None) -> None:
        super().__init__(backing, fence)
        self._log_key = None if partition is None else (OPAQUE_LOG_KEY, int(partition[0]), int(partition[1]))
        self._log_loaded = False
        self._log_txid: int | None = None     # the txid the stored log is about
        self._log_keys: set[tuple] = set()    # every key an attempt of _log_txid wrote
        self._touched: set[tuple] = set()     # keys written by the commit in progress

    def begin_commit(self, txid: int) -> None:
        super().begin_commit(txid)
        self._touched = set()
        if self._log_key is not None and not self._log_loaded:
            # First commit, or a write failed since the last load: the store is the truth (a put
            # that raised may still have landed, and its log names keys the replay must revert).
            raw = self.backing.multi_get([self._log_key])[0]
            self._log_txid, self._log_keys = None, set()
            if isinstance(raw, dict):
                self._log_txid = raw.get("txid")
                self._log_keys = {tuple(k) for k in raw.get("keys", [])}
            self._log_loaded = True

    def commit(self, txid: int) -> None:
        if self._log_key is not None and self._log_txid == txid:
            stale = sorted(self._log_keys - self._touched, key=repr)
            if stale:
                self._revert(txid, stale)
        super().commit(txid)

    def _put(self, keys: list[tuple], values: list[Any]) -> None:
        try:
            super()._put(keys, values)
        except BaseException:
            self._log_loaded = False    # reload the commit log before the next attempt
            raise

    def _revert(self, txid: int, keys: list[tuple]) -> None:
        """Keys an earlier attempt of ``txid`` wrote and this one did not: back to their value before it."""
        put_keys, put_values = [], []
        for key, raw in zip(keys, self.backing.multi_get(keys)):
            if raw is not None and raw[0] == txid:
                put_keys.append(key)
                put_values.append([txid, raw[1], raw[1]])
        if put_keys:
            self._put(put_keys, put_values)
            log.info("opaque state: txid %d replayed without %d keys an earlier attempt wrote; their "
                     "values are back to before txid %d", txid, len(put_keys), txid)

    def _logical(self, raw: Any) -> Any:
        return raw[2]

    def items(self) -> Iterator[tuple[tuple, Any]]:
        """As MapState.items, without keys a reverted attempt left at "absent" (``[txid, None, None]``)."""
        for key, value in super().items():
            if value is not None:
                yield key, value

    def multi_get(self, keys: list[tuple]) -> list[Any]:
        # Inside a commit, a key written by an earlier attempt of this txid reads as its value
        # before this txid (Storm's OpaqueValue.get): the attempt being redone never happened.
        txid = self._txid
        out: list[Any] = []
        for raw in self.backing.multi_get(_keys(keys)):
            if raw is None:
                out.append(None)
            elif txid is not None and raw[0] == txid:
                out.append(raw[1])
            else:
                out.append(raw[2])
        return out

    def multi_update(self, keys: list[tuple], updaters: list[Callable[[Any], Any]]) -> list[Any]:
        txid = self._current_txid("multi_update")
        keys = _keys(keys)
        _check_lengths(keys, updaters, "updaters")
        results: list[Any] = []
        stored: list[Any] = []
        for key, raw, updater in zip(keys, self.backing.multi_get(keys), updaters):
            if raw is None:
                prev = None
            elif raw[0] == txid:
                prev = raw[1]           # replay: undo the earlier attempt, whatever it carried
            elif raw[0] > txid:
                raise _newer_txid(self, key, raw[0], txid)
            else:
                prev = raw[2]
            # prev is stored next to the new value: an updater that mutates its argument (old.append)
            # must not change it, or a replay would start from the wrong value.
            value = updater(_private_copy(prev))
            results.append(value)
            stored.append([txid, prev, value])
        if not keys:
            return results
        if self._log_key is not None:
            # the log goes first in the same put: it must name a key before the key holds txid's value
            self._touched.update(keys)
            logged = (self._log_keys if self._log_txid == txid else set()) | self._touched
            self._put([self._log_key, *keys], [{"txid": txid, "keys": [list(k) for k in logged]}, *stored])
            self._log_txid, self._log_keys = txid, logged
        else:
            self._put(keys, stored)
        return results

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        # As in Storm's OpaqueMap: a put is an update that ignores the old value, so prev stays right.
        self.multi_update(keys, [_Constant(v) for v in values])


class NonTransactionalMap(MapState):
    """Stores the bare value; a replayed batch is applied again (at-least-once)."""

    def multi_update(self, keys: list[tuple], updaters: list[Callable[[Any], Any]]) -> list[Any]:
        keys = _keys(keys)
        _check_lengths(keys, updaters, "updaters")
        results = [updater(raw) for raw, updater in zip(self.backing.multi_get(keys), updaters)]
        if keys:
            self.backing.multi_put(keys, results)
        return results

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        keys = _keys(keys)
        _check_lengths(keys, values, "values")
        self.backing.multi_put(keys, list(values))


def _newer_txid(state: MapState, key: tuple, stored: int, txid: int) -> StateFencedError:
    return StateFencedError(
        f"{type(state).__name__}: key {list(key)!r} holds txid {stored}, newer than this commit's txid {txid}: "
        "txids restarted or a stale task is writing (a new `stormpy local` run, a topology resubmitted "
        "under another name, or two topologies on one state); give each its own state")


_WRAPPERS: dict[str, type[MapState]] = {
    TRANSACTIONAL: TransactionalMap,
    OPAQUE: OpaqueMap,
    NON_TRANSACTIONAL: NonTransactionalMap,
}


def check_kind(kind: str) -> str:
    """``kind`` itself, or a ValueError naming the three valid kinds."""
    if kind not in _WRAPPERS:
        raise ValueError(f"unknown map state kind {kind!r}: expected one of "
                         f"{', '.join(repr(k) for k in KINDS)}")
    return kind


class MapStateFactory(StateFactory):
    """A StateFactory wrapping ``make_backing(conf, context, partition_index, num_partitions)``.

    Holds only ``make_backing`` and ``kind``, so it pickles whenever ``make_backing`` does
    (cloudpickle handles a user's lambda; built-in backends pass a module-level BackingMaker).
    """

    def __init__(self, make_backing: Callable[[Any, Any, int, int], BackingMap], kind: str) -> None:
        if not callable(make_backing):
            raise TypeError(f"make_backing must be callable (conf, context, partition_index, "
                            f"num_partitions) -> BackingMap, got {make_backing!r}")
        self.make_backing = make_backing
        self.kind = check_kind(kind)

    def make_state(self, conf: Any, context: Any, partition_index: int, num_partitions: int) -> MapState:
        backing = self.make_backing(conf, context, partition_index, num_partitions)
        fence = None
        if self.kind != NON_TRANSACTIONAL and supports_fencing(backing):
            topology = str((conf or {}).get(cfg.TOPOLOGY_NAME.name) or "")
            fence = Fence(backing, partition_index, num_partitions, topology, repr(self.make_backing))
        if self.kind == OPAQUE:
            log_partition = (partition_index, num_partitions) if getattr(backing, "commit_log", False) else None
            return OpaqueMap(backing, log_partition, fence)
        return _WRAPPERS[self.kind](backing, fence)

    def placement(self) -> str | None:
        """Where the built-in backend keeps the state ("process", "host" or None: shared)."""
        return getattr(getattr(self.make_backing, "cls", None), "placement", None)

    def describe(self) -> str:
        return repr(self.make_backing)

    def open_map(self) -> MapState:
        """The same storage read outside a topology: backing made for partition 0 of 1, empty conf.

        Good for backends whose storage does not depend on the partition (all built-in ones:
        partitions own disjoint keys of one shared store). Never cached: it reads what is stored now.
        """
        if isinstance(self.make_backing, BackingMaker):
            return _WRAPPERS[self.kind](self.make_backing.uncached())
        return self.make_state({}, None, 0, 1)

    def __repr__(self) -> str:
        return f"MapStateFactory({self.make_backing!r}, {self.kind!r})"


def map_state_factory(make_backing: Callable[[Any, Any, int, int], BackingMap], kind: str) -> MapStateFactory:
    """A StateFactory of the given kind ("transactional" | "opaque" | "non_transactional")."""
    return MapStateFactory(make_backing, kind)


class _Constant:
    """An updater that ignores the old value (picklable, unlike a lambda in a loop)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, old: Any) -> Any:
        return self.value


_IMMUTABLE = (int, float, str, bool, type(None))


def _private_copy(value: Any) -> Any:
    return value if isinstance(value, _IMMUTABLE) else copy.deepcopy(value)


def _keys(keys: Sequence[Any]) -> list[tuple]:
    """Keys as tuples: a list becomes a tuple, a scalar becomes a 1-tuple (``"the"`` -> ``("the",)``)."""
    out: list[tuple] = []
    for k in keys:
        if isinstance(k, tuple):
            out.append(k)
        elif isinstance(k, list):
            out.append(tuple(k))
        else:
            out.append((k,))
    return out


def _check_lengths(keys: Sequence[Any], other: Sequence[Any], what: str) -> None:
    if len(keys) != len(other):
        raise ValueError(f"{len(keys)} keys but {len(other)} {what}")
