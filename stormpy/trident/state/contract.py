"""Trident's state contract: what a committer calls on a State, what a map state stores through.

A Trident committer (a processing bolt that persists) owns one ``State`` per partition and brackets
each batch's writes with ``begin_commit(txid)`` / ``commit(txid)``; a ``StateFactory`` makes that
State inside a worker; a ``StateUpdater`` applies a batch's tuples to it. The map states
(:mod:`stormpy.trident.state.map_state`) keep their values in a :class:`BackingMap`, the raw
storage a backend (memory, SQLite, Redis, the user's own) implements.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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

    def open_map(self) -> Any:
        """A MapState over the same storage for use outside a topology (reports, tests)."""
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
    #: Nimbus refuses, at submit, a topology that would outgrow a state kept in one place
    #: (stormpy.trident.planner.placement).
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
