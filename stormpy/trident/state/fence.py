"""Fencing of a map state partition: one owner topology, one writing task, txids that only grow.

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
"""
from __future__ import annotations

import logging
from typing import Any

from stormpy.trident.state.backing import CachedMap
from stormpy.trident.state.contract import FENCE_KEY, OWNER_KEY, BackingMap, StateFencedError

log = logging.getLogger(__name__)


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
