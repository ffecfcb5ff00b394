"""The acker's pure state: an XOR ledger of tuple trees with rotating-bucket timeouts.

Storm's protocol (DESIGN section 6): the spout sends ``init(root, xor of its edge ids, spout
task)``; every bolt that acks a tuple sends ``ack(root, edge id ^ ids of the tuples anchored to
it)``; when a root's value reaches 0 and the spout task is known, the tree is complete. The
messages can arrive in any order (an ack may overtake the init), which XOR does not mind.
A ``fail`` marks the tree failed; the spout is told as soon as its task is known.

Timeouts use ``stormpy.rotating_map.RotatingMap``: entries live in generation buckets; ``rotate()``
expires the oldest bucket, so an entry lives between (n-2) and (n-1) rotation periods.
Nothing here does I/O or reads the clock: the acker bolt and the spout executor call
``rotate()`` from their timers, and the tests drive it by hand.
"""
from __future__ import annotations

import logging
from typing import Any

from stormpy.rotating_map import RotatingMap
from stormpy.streams import ACK_ACK, ACK_FAIL, ACK_INIT

try:
    import cython   # compiled (setup.py): the declarations below are C types
except ImportError:   # Cython is only needed to build: interpreted without it, the same answers
    from stormpy.task import not_compiled as cython   # type: ignore[no-redef]  # the same names

log = logging.getLogger(__name__)

ACKED = "ack"
FAILED = "fail"


def _held(buckets: list[dict[int, list[Any]]], root: int) -> bool:
    for bucket in buckets:
        if root in bucket:
            return True
    return False


class Ledger:
    """XOR state of the tuple trees one acker task tracks.

    Each method returns ``None`` while a tree is still open, or ``(ACKED|FAILED, spout_task)``
    once the spout must be told; the entry is then gone. An entry is a list
    ``[value, spout_task or None, failed]`` so updates happen in place.
    """

    def __init__(self, num_buckets: int = 3) -> None:
        self._pending: RotatingMap[int, list[Any]] = RotatingMap(num_buckets)

    def __len__(self) -> int:
        return len(self._pending)

    def init(self, root: int, value: int, spout_task: int) -> tuple[str, int] | None:
        entry = self._pending.get(root)
        if entry is None:
            entry = [value, spout_task, False]
            self._pending.put(root, entry)
        else:
            entry[0] ^= value
            entry[1] = spout_task
        return self._settle(root, entry)

    def ack(self, root: int, value: int) -> tuple[str, int] | None:
        entry = self._pending.get(root)
        if entry is None:
            # The ack overtook the spout's init: keep the partial value until it arrives.
            self._pending.put(root, [value, None, False])
            return None
        entry[0] ^= value
        return self._settle(root, entry)

    def fail(self, root: int) -> tuple[str, int] | None:
        entry = self._pending.get(root)
        if entry is None:
            self._pending.put(root, [0, None, True])
            return None
        entry[2] = True
        return self._settle(root, entry)

    def _settle(self, root: int, entry: list[Any]) -> tuple[str, int] | None:
        spout_task = entry[1]
        if spout_task is None:
            return None
        if entry[0] == 0:
            self._pending.pop(root)
            return (ACKED, spout_task)
        if entry[2]:
            self._pending.pop(root)
            return (FAILED, spout_task)
        return None

    @cython.locals(newest=dict, entry=list, out=list)   # compiled: dict and list operations in C
    def apply_batch(self, messages: list[Any], on_unknown: Any = None) -> list[tuple[str, int, int]]:
        """Apply a batch of ``(stream, src, values, anchors)`` acker messages in one loop.

        The same rules as :meth:`init`/:meth:`ack`/:meth:`fail`, inlined, because this runs
        two or three times per tuple tree. An ``__ack_ack`` message may carry several
        ``root, value`` pairs (bolt executors send one per acker task per flush), an
        ``__ack_init`` several ``root, value, spout task`` triples (spout executors, likewise). Returns ``(ACKED|FAILED, root, spout_task)`` for
        every tree that settled. Messages on other streams go to ``on_unknown(message)``.
        """
        pending = self._pending
        newest = pending.newest()   # rotate() runs between batches (same thread), not during one
        # A root missing from the newest dict and from the older generations that hold entries
        # (usually none: only rotate() adds any) is new and goes straight in; one found in an
        # older generation takes the general path.
        older = pending.older()
        out: list[tuple[str, int, int]] = []
        for message in messages:
            stream = message[0]
            values = message[2]
            if stream == ACK_ACK:
                # [root, value, root, value, ...]: a bolt executor's acks of one flush. An ack
                # never fails a tree, and a failed tree whose spout task is known is gone.
                pairs = iter(values)   # zip(it, it): the pairs without index arithmetic
                for root, value in zip(pairs, pairs):
                    entry = newest.get(root)
                    if entry is None:
                        if older and _held(older, root):
                            self._append(out, root, self.ack(root, value))
                        else:
                            newest[root] = [value, None, False]   # the ack overtook its init
                        continue
                    entry[0] ^= value
                    if not entry[0] and entry[1] is not None:
                        del newest[root]
                        out.append((ACKED, root, entry[1]))
                continue
            if stream == ACK_INIT:
                # [root, value, spout task, ...]: the trees a spout executor started since its
                # last flush.
                triples = iter(values)
                for root, value, spout_task in zip(triples, triples, triples):
                    entry = newest.get(root)
                    if entry is None:
                        if value and not (older and _held(older, root)):
                            newest[root] = [value, spout_task, False]
                        else:
                            self._append(out, root, self.init(root, value, spout_task))
                        continue
                    entry[0] ^= value
                    entry[1] = spout_task
                    if entry[0] == 0:
                        del newest[root]
                        out.append((ACKED, root, spout_task))
                    elif entry[2]:
                        del newest[root]
                        out.append((FAILED, root, spout_task))
                continue
            if stream != ACK_FAIL:
                if on_unknown is not None:
                    on_unknown(message)
                continue
            self._append(out, values[0], self.fail(values[0]))
        return out

    @staticmethod
    def _append(out: list[tuple[str, int, int]], root: int, result: tuple[str, int] | None) -> None:
        if result is not None:
            out.append((result[0], root, result[1]))

    def rotate(self) -> list[int]:
        """Expire the oldest generation; returns the expired roots.

        The spout is not told: its own pending map times the tuple out (as in Storm), which
        also covers trees whose init never reached this acker.
        """
        return [root for root, _ in self._pending.rotate()]
