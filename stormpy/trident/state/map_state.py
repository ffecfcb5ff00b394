"""Trident state: the State / MapState contract and the three map wrappers over a BackingMap.

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

Fencing (transactional and opaque maps over a backing map with ``fencing = True``: Memory, SQLite,
Redis). Txids only ever grow for one topology, and one task owns a partition at a time; a writer
that breaks either would corrupt counts silently, so each state keeps two more reserved keys:

- ``(OWNER_KEY,)``: ``{"topology": name}``, written by the first topology that commits into the
  state. Another topology (one resubmitted under another name, whose txids start again at 1) is
  refused with :class:`StateFencedError` instead of skipping or overwriting the first one's values.
- ``(FENCE_KEY, partition, partitions)``: ``{"topology": name, "epoch": E, "txid": T}``. A task
  claims its partition at its first commit by raising the epoch (a compare-and-set in the store);
  every later put of that task is conditional on the record still holding its epoch, in the same
  atomic write as the values, and carries ``T``, the newest txid whose writes landed. So a stale
  task (its worker cut off or replaced, still running) cannot write once a newer one claimed the
  partition, and a commit of a txid below ``T`` (txids restarted: a new ``stormpy local`` run, a
  reset transactional state) is refused, as SparkState refuses it.

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
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from stormpy import config as cfg

log = logging.getLogger(__name__)

TRANSACTIONAL = "transactional"
OPAQUE = "opaque"
NON_TRANSACTIONAL = "non_transactional"
KINDS = (TRANSACTIONAL, OPAQUE, NON_TRANSACTIONAL)
#: First element of the reserved key of an opaque state partition's commit log (never a user key).
OPAQUE_LOG_KEY = "$stormpy.opaque.log"
#: First element of the reserved key of a partition's fencing record (topology, epoch, newest txid).
FENCE_KEY = "$stormpy.fence"
#: First element of the reserved key naming the topology that owns a state.
OWNER_KEY = "$stormpy.owner"
#: Every reserved key's first element starts with this; ``items()`` skips such keys.
RESERVED_PREFIX = "$stormpy."


class StateFencedError(RuntimeError):
    """The state refuses this writer: another topology owns it, a newer task took the partition
    over, or txids went backwards. Fails the batch; retrying cannot help, so the message says what to do."""


def is_reserved_key(key: tuple) -> bool:
    """Whether ``key`` is one of stormpy's bookkeeping keys (commit log, fence, owner)."""
    return bool(key) and isinstance(key[0], str) and key[0].startswith(RESERVED_PREFIX)


class State:
    """A partition of a Trident state; the committer brackets each batch's writes with these."""

    def begin_commit(self, txid: int) -> None:
        """Called before the updates of batch ``txid`` (possibly again, for a replayed txid)."""

    def commit(self, txid: int) -> None:
        """Called after every update of batch ``txid`` was applied."""

    def close(self) -> None:
        """Release connections (the task is shutting down). Optional; a no-op by default."""


class StateFactory:
    """Makes the State of one partition inside a worker; travels to workers pickled (cloudpickle)."""

    def make_state(self, conf: Any, context: Any, partition_index: int, num_partitions: int) -> State:
        raise NotImplementedError(f"{type(self).__name__} must implement make_state()")

    def open_map(self) -> "MapState":
        """A map over the same storage for use outside a topology (reports, tests)."""
        raise NotImplementedError(f"{type(self).__name__} has no open_map()")


class StateUpdater:
    """Applies one batch's tuples to a state partition (``partition_persist``)."""

    def update_state(self, state: State, tuples: list, collector: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement update_state()")


class BackingMap:
    """Raw storage under a map state: stored values in, stored values out, ``None`` = absent.

    ``multi_put`` should be atomic where the store allows it; the wrappers stay correct if it is
    not (each key carries its own txid), as long as a failed put raises.

    ``commit_log``: whether an opaque state may keep its per-partition commit log (a reserved key,
    see the module docstring) in this map. stormpy's own maps opt in; a user's BackingMap does not
    by default, so it only ever holds the user's keys (its opaque replays then behave as Storm's
    OpaqueMap: exact unless a replay carries fewer keys than an attempt that already landed).

    ``fencing``: whether ``multi_put_if`` is implemented (an atomic conditional put). With it,
    transactional and opaque states keep an owner and a per-partition fence record in this map
    (see the module docstring) and refuse other topologies and stale tasks.
    """

    commit_log: bool = False
    fencing: bool = False
    #: "process" (one worker's memory), "host" (one host's disk) or None (shared by every host):
    #: Nimbus refuses, at submit, a topology that would outgrow a state kept in one place (placement.py).
    placement: str | None = None

    def multi_get(self, keys: list[tuple]) -> list[Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement multi_get()")

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement multi_put()")

    def multi_put_if(self, keys: list[tuple], values: list[Any], guard_key: tuple, guard_value: Any) -> bool:
        """Atomically: if the stored value of ``guard_key`` equals ``guard_value`` (``None``: absent),
        put every key and return True; else put nothing and return False. Needed for ``fencing``.

        Values are compared as encoded by :func:`encode_value` (the same JSON text)."""
        raise NotImplementedError(f"{type(self).__name__} must implement multi_put_if() to set fencing = True")

    def items(self) -> Iterator[tuple[tuple, Any]]:
        """Every (key, stored value); optional (reports read a whole state through ``open_map``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot list its keys")

    def close(self) -> None:
        """Release connections; optional."""


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


class Fence:
    """The owner and fencing record of one state partition (see the module docstring).

    ``begin(txid)`` claims the partition at the first commit (and reloads the record after a failed
    write); ``put`` writes values conditional on this task's epoch, with the record in the same
    atomic write whenever its txid changes. Called from the executor thread that owns the partition.
    """

    #: claim attempts before giving up when other tasks keep claiming the same partition
    CLAIM_ATTEMPTS = 20

    def __init__(self, backing: BackingMap, partition_index: int, num_partitions: int, topology: str,
                 what: str) -> None:
        self.backing = backing
        self.key: tuple = (FENCE_KEY, int(partition_index), int(num_partitions))
        self.owner_key: tuple = (OWNER_KEY,)
        self.topology = topology
        self.what = f"{what} partition {partition_index}/{num_partitions}"
        self.record: dict[str, Any] | None = None   # what this task last stored (None: not claimed yet)
        self._stale = False   # a write failed: the record in the store may differ from self.record

    @property
    def epoch(self) -> int | None:
        return None if self.record is None else self.record["epoch"]

    def _read(self, key: tuple) -> Any:
        store = self.backing.backing if isinstance(self.backing, CachedMap) else self.backing
        return store.multi_get([key])[0]

    def begin(self, txid: int) -> None:
        """Before the writes of ``txid``: claim or reload the record, refuse a txid below its newest."""
        if self.record is None:
            self._claim()
        elif self._stale:
            self._reload()
        newest = self.record.get("txid")
        if newest is not None and newest > txid:
            raise StateFencedError(
                f"{self.what} already holds txid {newest} of topology {self.topology!r}, and this commit is "
                f"txid {txid}: txids restarted (a new `stormpy local` run, or the topology's transactional "
                "state was reset); give each run its own state (another path, table or prefix, or "
                "MemoryMapState.clear) instead of overwriting newer values")

    def put(self, keys: list[tuple], values: list[Any], txid: int) -> None:
        """``multi_put`` that lands only while this task's epoch holds the partition."""
        if self.record is None:
            self._claim()
        elif self._stale:
            self._reload()
        new = self.record if self.record.get("txid") == txid else {**self.record, "txid": txid}
        put_keys, put_values = (keys, values) if new is self.record else ([*keys, self.key], [*values, new])
        try:
            applied = self.backing.multi_put_if(put_keys, put_values, self.key, self.record)
        except BaseException:
            self._stale = True
            raise
        if not applied:
            stored = self._read(self.key)
            if stored != new:    # equal: our own write had landed (a call retried after a lost reply)
                self._stale = True
                self._refuse(stored)
        self.record = new

    def _claim(self) -> None:
        owner = self._read(self.owner_key)
        if owner is None:
            mine = {"topology": self.topology}
            if self.backing.multi_put_if([self.owner_key], [mine], self.owner_key, None):
                owner = mine
            else:
                owner = self._read(self.owner_key)
        self._check_owner(owner)
        for _ in range(self.CLAIM_ATTEMPTS):
            stored = self._read(self.key)
            if stored is not None:
                self._check_owner(stored)
            new = {"topology": self.topology, "epoch": (stored or {}).get("epoch", 0) + 1,
                   "txid": (stored or {}).get("txid")}
            if self.backing.multi_put_if([self.key], [new], self.key, stored):
                self.record, self._stale = new, False
                log.info("%s: claimed by topology %r, epoch %d (newest txid %s)", self.what, self.topology,
                         new["epoch"], new["txid"])
                return
        raise StateFencedError(f"{self.what}: could not claim the partition in {self.CLAIM_ATTEMPTS} tries: "
                               "other tasks keep claiming it (two topologies or tasks on one state?)")

    def _reload(self) -> None:
        stored = self._read(self.key)
        if not isinstance(stored, dict) or stored.get("epoch") != self.epoch \
                or stored.get("topology") != self.topology:
            self._refuse(stored)
        self.record, self._stale = stored, False

    def _check_owner(self, stored: Any) -> None:
        owner = stored.get("topology") if isinstance(stored, dict) else None
        if owner != self.topology:
            raise StateFencedError(
                f"{self.what} belongs to topology {owner!r}; topology {self.topology!r} may not write it "
                "(a topology resubmitted under another name starts again at txid 1, and two topologies on "
                "one state mix their txids): give it its own state (another path, table or prefix), or "
                "delete the old state first")

    def _refuse(self, stored: Any) -> None:
        if isinstance(stored, dict) and stored.get("topology") != self.topology:
            self._check_owner(stored)
        theirs = stored.get("epoch") if isinstance(stored, dict) else None
        raise StateFencedError(
            f"{self.what} was taken over by a newer task (epoch {theirs}, this task's is {self.epoch}): "
            "this task is stale (its worker was cut off or replaced while still running) and may not write")


def supports_fencing(backing: BackingMap) -> bool:
    """Whether fenced writes (``multi_put_if``) may replace ``multi_put`` on this backing map.

    ``fencing = True`` and a ``multi_put_if`` defined no higher in the class hierarchy than
    ``multi_put``: a subclass of a built-in map that overrides only ``multi_put`` (to log, count or
    transform writes) keeps every write going through it, unfenced (the per-key txid checks still apply).
    """
    if isinstance(backing, CachedMap):
        return supports_fencing(backing.backing)
    if not getattr(backing, "fencing", False):
        return False
    mro = type(backing).__mro__
    put_owner = next((c for c in mro if "multi_put" in c.__dict__), BackingMap)
    put_if_owner = next((c for c in mro if "multi_put_if" in c.__dict__), BackingMap)
    return put_if_owner is not BackingMap and issubclass(put_if_owner, put_owner)


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


class CachedMap(BackingMap):
    """An LRU read cache over a BackingMap, written through (Storm's CachedMap).

    Correct because a partition's keys are written only by that partition's state (group_by
    partitions the keys), and every such write goes through this object: the cache is updated only
    after the store accepted a put, and a failed put drops its keys (the store may hold either
    value). Absent keys are cached as absent for the same reason. Do not enable it where something
    else writes the same keys while the topology runs (another topology on the same table or
    prefix, a script writing through ``open_map()``). ``open_map()`` never caches.
    """

    _ABSENT = object()

    def __init__(self, backing: BackingMap, size: int) -> None:
        if size < 1:
            raise ValueError(f"cache size must be >= 1, got {size}")
        self.backing = backing
        self.size = size
        self.commit_log = bool(getattr(backing, "commit_log", False))
        self.fencing = bool(getattr(backing, "fencing", False))
        self._cache: OrderedDict[tuple, Any] = OrderedDict()

    def multi_get(self, keys: list[tuple]) -> list[Any]:
        cache = self._cache
        out: list[Any] = [None] * len(keys)
        missing: list[int] = []
        for i, key in enumerate(keys):
            value = cache.get(key, self)
            if value is self:
                missing.append(i)
            else:
                cache.move_to_end(key)
                out[i] = None if value is self._ABSENT else decode_value(value)
        if missing:
            fetched = self.backing.multi_get([keys[i] for i in missing])
            for i, value in zip(missing, fetched):
                out[i] = value
                cache[keys[i]] = self._ABSENT if value is None else encode_value(value)
            self._trim()
        return out

    def multi_put(self, keys: list[tuple], values: list[Any]) -> None:
        try:
            self.backing.multi_put(keys, values)
        except BaseException:
            for key in keys:
                self._cache.pop(key, None)
            raise
        self._remember(keys, values)

    def multi_put_if(self, keys: list[tuple], values: list[Any], guard_key: tuple, guard_value: Any) -> bool:
        try:
            applied = self.backing.multi_put_if(keys, values, guard_key, guard_value)
        except BaseException:
            for key in (*keys, guard_key):
                self._cache.pop(key, None)
            raise
        if not applied:
            self._cache.pop(guard_key, None)   # someone else wrote it: read it from the store next time
            return False
        self._remember(keys, values)
        return True

    def _remember(self, keys: list[tuple], values: list[Any]) -> None:
        for key, value in zip(keys, values):
            # Kept as JSON text: every read decodes a private copy, so a caller mutating what it
            # got cannot change the cache (and a deepcopy would cost several times more).
            self._cache[key] = encode_value(value)
            self._cache.move_to_end(key)
        self._trim()

    def items(self) -> Iterator[tuple[tuple, Any]]:
        return self.backing.items()

    def close(self) -> None:
        self._cache.clear()
        self.backing.close()

    def _trim(self) -> None:
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)


class BackingMaker:
    """Picklable ``make_backing`` for the built-in backends: ``cls(*args, **kwargs)`` per partition,
    wrapped in a CachedMap of ``cache_size`` entries when that is > 0."""

    def __init__(self, cls: type[BackingMap], *args: Any, cache_size: int = 0, **kwargs: Any) -> None:
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        self.cls = cls
        self.args = args
        self.kwargs = kwargs
        self.cache_size = cache_size

    def __call__(self, conf: Any, context: Any, partition_index: int, num_partitions: int) -> BackingMap:
        backing = self.cls(*self.args, **self.kwargs)
        return CachedMap(backing, self.cache_size) if self.cache_size else backing

    def uncached(self) -> BackingMap:
        """The backing map without a cache (what ``open_map()`` reads through)."""
        return self.cls(*self.args, **self.kwargs)

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.cls.__name__}({', '.join(parts)})"


class _Constant:
    """An updater that ignores the old value (picklable, unlike a lambda in a loop)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, old: Any) -> Any:
        return self.value


# Built once: json.dumps()/JSONEncoder.encode() build a new C encoder on every call, which costs
# more than the encoding itself on the per-key hot path (1.2 us vs 0.3 us for ["word"]).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_DECODER = json.JSONDecoder()
try:
    from json.encoder import c_make_encoder as _c_make_encoder
except ImportError:  # pragma: no cover - CPython always has the C accelerator
    _c_make_encoder = None
if _c_make_encoder is not None:
    _c_encode = _c_make_encoder(None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",",
                                False, False, True)

    def _encode(value: Any) -> str:
        if isinstance(value, str):
            return json.encoder.encode_basestring(value)
        return "".join(_c_encode(value, 0))
else:  # pragma: no cover
    _encode = _ENCODER.encode


def encode_key(key: tuple) -> str:
    """A key tuple as stored by the built-in backends: a compact UTF-8 JSON list, e.g. ``["the"]``."""
    return _encode(list(key))


def decode_key(text: str | bytes) -> tuple:
    """The key tuple of a stored JSON list."""
    return tuple(decode_value(text))


def encode_value(value: Any) -> str:
    """A stored value as compact JSON (TypeError naming the value when it is not JSON-able)."""
    try:
        return _encode(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"state values must be JSON-serializable: {value!r} ({exc})") from None


def decode_value(text: str | bytes) -> Any:
    """A stored JSON value (``bytes`` as Redis returns them, or ``str``)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return _DECODER.decode(text)


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
