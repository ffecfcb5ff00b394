"""The tuple-tree arithmetic, in one place: start a tree, extend it, settle, fail, flush.

Storm's acking (DESIGN section 6), as stormpy does it:

- **start** (spout emit with ``tup_id``): a random 64-bit root id, a random edge id per
  receiving task, each message carrying the pair ``(root, edge)``; the acker task
  ``acker_tasks[root % n]`` gets ``__ack_init(root, xor of the edges, spout task)`` and the
  spout task's pending map remembers ``[tup_id, start time, stream]``.
- **extend** (bolt emit anchored to tuples): per target a new edge id, XORed into each
  anchor's *ack value* and carried by the message as ``(root, edge, ...)``, a pair per anchor
  root. A
  raw message (raw-batch drivers) keeps no ack value: its new edge joins ``pending`` at once.
- **settle** (bolt ack): ``pending[root] ^= edge ^ ack value`` for each anchor of the tuple;
  consecutive tuples of one tree combine in locals before touching the dict (compiled, a
  received batch's runs go into :class:`Runs`, a table of C integers beside the dict; the
  flush sends one pair a root).
- **fail**: the roots' combined acks are dropped and ``__ack_fail(root)`` goes to their ackers.
- **flush**: ``pending`` becomes one ``__ack_ack([root, value, ...])`` message per acker task,
  and the trees started since the last flush one ``__ack_init([root, value, spout task, ...])``
  per acker task (the acker's traffic is a few messages per batch, not one per tuple; an ack
  that reaches the acker before its tree's init is kept until the init comes).
- **share** (bolt executors stepped by one thread, ``ExecutorLoop``): their ``pending`` (and
  ``runs``) is one dict (:class:`SharedAcks`), flushed by the loop, so a sentence acked by its split and
  by each count executor its words went to reaches the acker as one ``root, value`` pair.

XOR is associative and commutative, so combining per root and per flush gives the acker the
same value as one message per edge would. :class:`TupleTrees` is one executor's share (the
executor owns it, its tasks and drivers are handed it); the emit strategies and the fast emit
paths below are built from it. The fast paths inline the one-target, one-root case of
``spout_place``/``bolt_place`` (they run once per emitted tuple; ``benchmarks/emit_cost.py``
measures them) and must send exactly what the general path sends — the random ids are drawn in
the same order, which ``tests/task/test_tuple_tree.py`` checks. Executor thread only.
"""
from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, TypeVar

from stormpy.serialization import INT_MAX, INT_MIN
from stormpy.streams import ACK_ACK, ACK_FAIL, ACK_INIT, DEFAULT_STREAM
from stormpy.task.runs import Runs, add_pending

try:
    import cython   # compiled, a constant of the compiler: the interpreted branches are not built
except ImportError:   # Cython is only needed to build: interpreted without it, the same answers
    from stormpy.task import not_compiled as cython   # type: ignore[no-redef]  # the same names

if TYPE_CHECKING:
    from stormpy.task.bolt_executor import BoltTask
    from stormpy.task.emit import FastRoute, Outbox
    from stormpy.task.spout_executor import SpoutTask
    from stormpy.api.tuple import Tuple

log = logging.getLogger(__name__)

#: A message's or received Tuple's tuple trees (None: not tracked): ``(root, edge)``, or
#: ``(root, edge, root, edge, ...)`` for a tuple anchored to several trees. A flat tuple, not
#: a ``{root: edge}`` map: one root is by far the common case, and a pair costs half a
#: one-entry dict to build and a quarter to read (no hash table, no iterator).
Anchors = tuple[int, ...]
#: ``place(stream, values, targets, tup_id, anchors)``: anchor and queue one emit.
Place = Callable[[str, Sequence[Any], Sequence[int], Any, Any], None]
#: A task's ``emit(values, tup_id, stream, anchors, direct_task, need_task_ids)``.
EmitFn = Callable[..., "list[int] | None"]

_getrandbits = random.getrandbits
if cython.compiled:   # lists with room: see capi.pxd
    from cython.cimports.stormpy.task.capi import list_put
else:
    from stormpy.task.capi import list_put
_flatten = chain.from_iterable

# Tuple-tree ids (roots and edges): random 64-bit integers, drawn once per emitted tuple.
# Interpreted they come from ``random.getrandbits``. Compiled (``tree.pxd``) they come from
# the splitmix64 generator below, in C: ``getrandbits(64)`` called from compiled code cost about
# 480 machine instructions an id (the call, two Mersenne Twister words, a long made from bytes),
# 5% of a counted word in the local word count, where the generator and the long it returns
# cost under 60. The ids only need to be unpredictable enough not to collide or cancel in the
# acker's XOR: splitmix64 passes BigCrush, and its state is seeded from ``os.urandom`` in each
# process (again in a forked child, as ``random`` is).
_MASK = (1 << 64) - 1
_GAMMA, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_id_state = int.from_bytes(os.urandom(8), "little")


def _draw() -> int:
    """The next splitmix64 output. Compiled, in C integers; interpreted (masked to the same
    numbers) the emit paths use ``getrandbits`` instead, which is faster there."""
    global _id_state
    _id_state = (_id_state + _GAMMA) & _MASK
    z = _id_state
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK
    return z ^ (z >> 31)


def next_id() -> int:
    """A new random 64-bit tuple-tree id, drawn as the emit paths draw them."""
    return _draw() if cython.compiled else _getrandbits(64)


def seed_ids(seed: int) -> None:
    """Make the ids drawn from now on repeatable (tests compare two emit paths' traffic)."""
    global _id_state
    random.seed(seed)
    _id_state = seed & _MASK


def _reseed_ids() -> None:
    global _id_state
    _id_state = int.from_bytes(os.urandom(8), "little")


os.register_at_fork(after_in_child=_reseed_ids)
# Value types the short path accepts without a call; an int is checked against INT_MIN and INT_MAX inline.
_FAST_TYPES = frozenset({str, float, bool, type(None), bytes})
#: Shared values tuples of one-field streams holding a short ``str`` (``new_row`` on the emitting
#: side, ``drivers._share`` on the receiving side): strings up to this long, this many per cache.
SHARE_MAX_LEN = 128
SHARE_MAX = 4096
_tuple_new = tuple.__new__
_V = TypeVar("_V")


def keep_shared(cache: dict[str, _V], key: str, value: _V) -> _V:
    """``value``, kept in ``cache`` under ``key`` if the string is short; a full cache starts over."""
    if len(key) <= SHARE_MAX_LEN:
        if len(cache) >= SHARE_MAX:
            cache.clear()
        cache[key] = value
    return value


def new_row(route: FastRoute, values: Sequence[Any]) -> tuple[list[int], Any]:
    """``(targets, values tuple)`` of an emit fields-grouped on its one field, a ``str``
    (``FastRoute.rows``), kept for the next emit of the same string.

    The emit looks the string up once to route it; the values tuple it sends is of the class
    the receivers name their source's values with (``values_class``), and a receive loop takes
    a tuple of that class as it is (``drivers._deliver``), so the word is not looked up again on
    the receiving side (with the string's second hash and comparison, and what comes of them:
    352 of 8,753 machine instructions a word compiled, the local word count at parallelism 2).
    A cache cleared when full (``SHARE_MAX`` strings) costs each string it held one ``select``
    and one tuple again, as the receive side's cache did before.

    One cache per component and worker (``WorkerRuntime.emit_rows``): the plan fixes where a
    string goes, so every task of the component routes it alike and they share the rows (with a
    cache per task, two split tasks send a word as two tuples, which the count task then tells
    apart by comparing strings). Tasks on threads of their own share it too: a dict's get, set and
    clear are each atomic under the interpreter lock, and a lookup that misses a row cleared in
    between makes it again.
    """
    rows, cls = route.rows, route.values_cls
    assert rows is not None and cls is not None   # make_emit sets both or neither
    row: tuple[list[int], Any] = (route.select(values), _tuple_new(cls, values))
    return keep_shared(rows, values[0], row)


#: ``BoltTask.hand.roots`` while emits anchor to something other than the driver's tuple in
#: hand (``anchored()``, ``processing()``): its length is not 2, so the fast emit takes the
#: general path, which reads ``batch_anchors`` and ``current`` itself.
ANCHOR_ELSEWHERE: Anchors = ()


class Hand:
    """The tuple in hand and what the fast bolt emit needs of it (``BoltTask.hand``), in one
    object of three slots instead of attributes of two objects.

    ``current`` is the tuple in hand (``BoltTask.current``), ``roots`` the anchors to extend
    (None: emit unanchored; ``ANCHOR_ELSEWHERE``: take the general path) and ``edges`` the XOR
    of the edges emitted from the tuple in hand not yet in its ``_ack_val``. The receive loop
    sets ``current`` and ``roots`` per tuple and folds ``edges`` after ``process``;
    ``BoltTask.fold_hand`` does it for acks in ``process``. Invariant: the ack value of
    ``current`` is ``_ack_val ^ edges``. Compiled (``tree.pxd``) the fields are C fields, set
    per tuple with a pointer write (an attribute of the task cost about 130 machine
    instructions), and ``edges`` is a C 64-bit integer: the emit XORs into it without making
    an int object per word.
    """

    __slots__ = ("current", "roots", "edges")

    def __init__(self) -> None:
        self.current: Tuple | None = None
        self.roots: Anchors | None = None
        self.edges = 0

    def clear(self) -> None:
        """Nothing in hand (between batches, after a crash)."""
        self.current = None
        self.roots = None
        self.edges = 0


class Ticks:
    """The count of a stream's one-target fast emits until the next fold (``emit.count_ticks``),
    compiled: a list's ``append``, ``len`` and ``clear`` over a C integer.

    Why not the list of ``None`` the interpreter uses: the list grew from empty again after
    every fold, and a growing list is copied to a larger block every few appends (``capi.pxd``
    has the figures). Interpreted, the list stays: the interpreter has an instruction for
    ``list.append``, where this ``append`` would be a method call."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def append(self, item: None) -> None:
        self.n += 1

    def __len__(self) -> int:
        return self.n

    def clear(self) -> None:
        self.n = 0


class TupleTrees:
    """One executor's tuple-tree bookkeeping: its combined acks and the way to its ackers."""

    __slots__ = ("outbox", "acker_tasks", "num_ackers", "src_task", "pending", "runs", "acks", "inits",
                 "max_inits", "root_bits", "root_mult", "root_home", "shared")

    def __init__(self, outbox: Outbox, acker_tasks: Sequence[int], src_task: int) -> None:
        self.outbox = outbox
        self.acker_tasks = list(acker_tasks)
        self.num_ackers = len(self.acker_tasks)
        #: The executor's first task: the source of its combined ``__ack_ack`` messages.
        self.src_task = src_task
        #: root id -> XOR of this executor's settled edges and ack values since the last flush
        self.pending: dict[int, int] = {}
        #: compiled, ``settle_runs``' runs (their roots' values XOR ``pending``'s), see Runs
        self.runs = Runs()
        #: per acker task (by index): ``[root, value, ...]`` settled as they are, uncombined
        #: (``settle_raw_batch``), sent with ``pending``'s at the next flush
        self.acks: list[list[int]] = [[] for _ in self.acker_tasks]
        #: per acker task (by index): ``[root, value, spout task, ...]`` of trees started since
        #: the last flush, sent as one ``__ack_init`` each; lists are replaced, never cleared
        self.inits: list[list[int]] = [[] for _ in self.acker_tasks]
        #: a list this long is sent at once (a long ``next_tuple`` must not hold its inits back)
        self.max_inits = 3 * max(1, outbox.batch_size)
        #: a new root is ``getrandbits(root_bits) * root_mult + root_home`` (``home_acker``)
        self.root_bits, self.root_mult, self.root_home = 64, 1, 0
        #: Set while ``pending`` is a :class:`SharedAcks`' dict: its owner flushes it, not :meth:`flush`.
        self.shared: SharedAcks | None = None

    def home_acker(self, index: int) -> None:
        """New trees' roots map to ``acker_tasks[index]`` (``root % n == index``), still random
        and below 2**64: the executor picks an acker of its own worker, so ``__ack_init`` and
        the acker's answer never cross workers. Bolts' acks find the acker by ``root % n``."""
        n = self.num_ackers
        self.root_bits, self.root_mult, self.root_home = 64 - n.bit_length(), n, index

    # ------------------------------------------------------------ start and extend
    def start(self, targets: Sequence[int], stream: str, spout_task: int, values: Sequence[Any]) -> int:
        """Start a tree: a new root, one anchored message per target, ``__ack_init`` to the
        root's acker. Returns the root (the spout task's pending map keeps it)."""
        root = self.new_root()
        self.init(root, self.edges(targets, stream, spout_task, values, root), spout_task)
        return root

    def new_root(self) -> int:
        """A new tree's root id: random, and ``root % num_ackers`` is its acker (``home_acker``)."""
        bits = (_draw() >> (64 - self.root_bits)) if cython.compiled else _getrandbits(self.root_bits)
        return bits * self.root_mult + self.root_home

    def edges(self, targets: Sequence[int], stream: str, src: int, values: Sequence[Any], root: int) -> int:
        """One message per target anchored to ``(root, new edge)``; returns the XOR of the edges.

        The anchored half of every emit of a tree with one root (a spout's new tree, a bolt's
        emit from a tuple with one root): the caller XORs the result into the ack-init value or
        into the anchor tuple's ack value.
        """
        outbox = self.outbox
        boxes = outbox.boxes
        batch_size = outbox.batch_size
        getrandbits = _getrandbits
        acc = 0
        for dest in targets:
            edge = next_id() if cython.compiled else getrandbits(64)
            acc ^= edge
            box = boxes.get(dest)
            if box is None:
                box = outbox.new_box(dest)
            list_put(box, (stream, src, values, (root, edge)))
            if len(box) >= batch_size:
                outbox.send_full(dest)
        return acc

    def init(self, root: int, value: int, spout_task: int) -> None:
        """Tell the tree's acker that ``spout_task`` started ``root`` with edges XORing to ``value``."""
        index = root % self.num_ackers
        inits = self.inits[index]
        inits += (root, value, spout_task)
        if len(inits) >= self.max_inits:
            self.send_inits(index)

    def send_inits(self, index: int) -> None:
        """The trees started for the ``index``-th acker task go to it as one ``__ack_init``."""
        inits = self.inits[index]
        self.inits[index] = []
        self.outbox.add(self.acker_tasks[index], (ACK_INIT, self.src_task, inits, None))

    def extend_raw(self, roots: Iterable[int], edge: int) -> None:
        """A new edge anchored to a raw message: it joins the combined acks of its roots now."""
        pending = self.pending
        get = pending.get
        for root in roots:
            pending[root] = get(root, 0) ^ edge

    # ------------------------------------------------------------ settle and fail
    def settle(self, anchors: Anchors | None, ack_val: int = 0) -> None:
        """Ack one tuple (or raw message, ``ack_val`` 0): its edges XOR the edges emitted from it."""
        if anchors is not None and self.num_ackers:
            pending = self.pending
            get = pending.get
            for i in range(0, len(anchors), 2):
                root = anchors[i]
                pending[root] = get(root, 0) ^ anchors[i + 1] ^ ack_val

    def settle_tuples(self, tups: Iterable[Tuple]) -> None:
        """``settle`` for a batch of Tuples (batching bolts' ``ack_many``)."""
        anchors_list: list[Anchors] = []
        valued: list[tuple[Anchors, int]] = []
        for tup in tups:
            if tup._anchors is not None:
                anchors_list.append(tup._anchors)
                if tup._ack_val:
                    valued.append((tup._anchors, tup._ack_val))
        self.settle_runs(anchors_list, valued)

    @cython.locals(pending=dict, runs=Runs, anchors_list=list, run_val=cython.ulonglong, edge=cython.ulonglong,
                   i=cython.Py_ssize_t, run_start=cython.Py_ssize_t, compiled=cython.bint)
    def settle_runs(self, anchors_list: list[Anchors], valued: Sequence[tuple[Anchors, int]]) -> None:
        """``settle`` for the acked tuples of a received batch, given as their anchors, and
        ``(anchors, ack value)`` of those whose ack value is not 0 (the driver keeps these, not
        the Tuples: holding a batch's Tuples alive until the end of the batch measured 25% more
        per tuple). Consecutive tuples of one root (a sentence's words) combine in locals, settled
        when the root changes. A tuple of several trees is settled by ``settle`` (rare: joins,
        batches).

        The edges and the ack values are settled in two passes (XOR is associative): a bolt
        that emits nothing (a count) acks tuples whose values are all 0, and has nothing in
        ``valued``.

        From the driver, a tuple of one root that emitted comes with its ack value already in
        its edge (``drivers._with_value``: one update a run, not one more a tuple), and only
        tuples of several roots are in ``valued``; ``settle_tuples`` passes every tuple's.

        Interpreted, a run goes into ``pending`` (inline: calling a function cost 0.9% more a
        word). Compiled, a run's XOR is a C 64-bit integer (``tree.pxd``) and it goes into
        ``runs``, a table of C integers (:class:`Runs`). An id outside 0..2**64-1 (a peer's bug:
        the wire checks ids are ints) does not fit: the batch's rest, from the run that met it,
        is then settled one tuple at a time into ``pending``, as interpreted."""
        if not self.num_ackers:
            return
        pending, runs, compiled = self.pending, self.runs, cython.compiled   # interpreted, locals are read faster
        run_root: int | None = None
        run_val = 0
        run_start = i = 0
        try:
            for i, anchors in enumerate(anchors_list):
                if len(anchors) != 2:
                    self.settle(anchors)
                    continue
                root, edge = anchors
                if root is run_root or root == run_root:   # in one process a tree's words share the root object
                    run_val ^= edge
                else:
                    if run_root is not None:
                        if compiled:
                            runs.xor(run_root, run_val)
                        else:
                            pending[run_root] = pending.get(run_root, 0) ^ run_val
                    run_root, run_start = root, i
                    run_val = edge
            if run_root is not None:
                if compiled:
                    runs.xor(run_root, run_val)
                else:
                    pending[run_root] = pending.get(run_root, 0) ^ run_val
        except OverflowError:
            for j in range(run_start, len(anchors_list)):
                if j > i or len(anchors_list[j]) == 2:   # tuples of several roots before i are settled
                    self.settle(anchors_list[j])
        for anchors, val in valued:   # every root is in ``pending`` or ``runs`` now
            if len(anchors) != 2:
                for root in anchors[0::2]:
                    pending[root] ^= val
            elif compiled:
                _xor_run(pending, runs, anchors[0], val)
            else:
                pending[anchors[0]] ^= val

    def settle_raw_batch(self, anchors_list: Iterable[Anchors]) -> None:
        """``settle`` for a whole batch of raw messages (ack value 0; the Spark sink's written
        batch): each ``root, edge`` goes to its acker's next ``__ack_ack`` as it is, not through
        ``pending`` -- the acker XORs two pairs of one root as it would their sum. A 50k-row
        batch holds 50k roots: combining them in a dict first cost 0.42 us per row against
        ~0.1, and that dict was flushed right after."""
        n = self.num_ackers
        if not n:
            return
        if n == 1:
            out = self.acks[0]
            for anchors in anchors_list:
                out += anchors   # already ``root, edge, ...``
            return
        acks = self.acks
        for anchors in anchors_list:
            for i in range(0, len(anchors), 2):
                values = acks[anchors[i] % n]
                values.append(anchors[i])
                values.append(anchors[i + 1])

    def fail_roots(self, anchors: Anchors | None, task_id: int) -> None:
        """Fail the trees of ``anchors`` at once: their combined acks go, ``__ack_fail`` is sent."""
        if anchors is None or not self.num_ackers:
            return
        for root in anchors[0::2]:
            self.pending.pop(root, None)
            self.runs.pop(root)
            index = root % self.num_ackers
            values = self.acks[index]
            if values and root in values[0::2]:   # its uncombined acks (``settle_raw_batch``) go too
                values[:] = [x for r, e in zip(values[0::2], values[1::2]) if r != root for x in (r, e)]
            self.outbox.add(self.acker_tasks[index], (ACK_FAIL, task_id, [root], None))

    def settled(self) -> dict[int, int]:
        """Root -> combined value of what this executor settled since the last flush (``pending``
        XOR ``runs``), the zeros left out: what the next flush sends (tests)."""
        combined = dict(self.pending)
        for root, val in self.runs.snapshot().items():
            combined[root] = combined.get(root, 0) ^ val
        return {root: val for root, val in combined.items() if val}

    # ------------------------------------------------------------ flush
    def has_acks(self) -> bool:
        return (self.shared is None and (bool(self.pending) or bool(self.runs))) or any(self.acks) or any(self.inits)

    def flush(self) -> None:
        """One ``__ack_init`` and one ``__ack_ack`` (``[root, value, root, value, ...]``) per
        acker task, into the outbox (a shared ``pending`` is its owner's to flush)."""
        for index, inits in enumerate(self.inits):
            if inits:
                self.send_inits(index)
        pending, runs = (self.pending, self.runs) if self.shared is None else ({}, None)
        per_acker = self.acks
        if not pending and not runs and not any(per_acker):
            return
        self.acks = [[] for _ in range(self.num_ackers)]
        if runs:
            runs.take_into(pending)
        add_pending(per_acker, pending)
        if runs:
            runs.drain(per_acker)
        add = self.outbox.add
        src = self.src_task
        for acker, values in zip(self.acker_tasks, per_acker):
            if values:
                add(acker, (ACK_ACK, src, values, None))

    # ------------------------------------------------------------ sharing
    def share(self, shared: SharedAcks) -> None:
        """Settle into ``shared`` from now on (the caller flushed what this one held)."""
        self.pending, self.runs = shared.pending, shared.runs
        self.shared = shared

    def unshare(self, keep: bool = False) -> None:
        """Settle into a dict of this executor's own again, flushed by :meth:`flush`. ``keep``:
        take the shared dict along (the executor may be writing to it on another thread, see
        ``ExecutorLoop._watchdog``), with what others settled into it."""
        if self.shared is None:
            return   # its own dict: what it holds is still to be flushed
        if not keep:
            self.pending, self.runs = {}, Runs()
        self.shared = None


def _xor_run(pending: dict[int, int], runs: Runs, root: int, val: int) -> None:
    """``root``'s combined value ^= ``val``, compiled: into ``runs``, where its runs went (a
    root or value outside 64 bits: ``pending``)."""
    try:
        runs.xor(root, val)
    except OverflowError:
        pending[root] = pending.get(root, 0) ^ val


class SharedAcks:
    """The combined acks of the bolt executors one thread steps in turn (``ExecutorLoop``).

    Why: every executor settling a tree sends the acker its own ``root, value`` pair per
    flush. A sentence split by one executor and counted by two sends three pairs, which the
    acker XORs one by one; settled into one dict they are one pair (the split's edge and
    the words' edges cancel: usually just the spout's edge is left). Callgrind, local word
    count: 3.2% fewer instructions per word at parallelism 2, 1.4% at 1.

    The owner (the loop) calls :meth:`flush` on the thread that steps the sharers, before the
    acker's step, at the end of every round and, in a worker, when a sharer's long step hands off
    mid-step (``ExecutorLoop.hand_off``); ``src_task`` names the first sharer.
    """

    __slots__ = ("pending", "runs", "acker_tasks", "src_task", "send", "members")

    def __init__(self, acker_tasks: Sequence[int], src_task: int,
                 send: Callable[[int, list[Any]], None]) -> None:
        self.pending: dict[int, int] = {}
        self.runs = Runs()
        self.acker_tasks = list(acker_tasks)
        self.src_task = src_task
        #: ``send(acker task, [message])``: the transfer, which any thread may call
        self.send = send
        #: the executors' TupleTrees settling into ``pending`` (kept by the owner)
        self.members: list[TupleTrees] = []

    def flush(self) -> None:
        """The settled acks: one ``__ack_ack`` per acker task."""
        if not self.pending and not self.runs:
            return
        per_acker: list[list[int]] = [[] for _ in self.acker_tasks]
        self.runs.take_into(self.pending)
        add_pending(per_acker, self.pending)
        self.runs.drain(per_acker)
        src = self.src_task
        for acker, values in zip(self.acker_tasks, per_acker):
            if values:
                try:
                    self.send(acker, [(ACK_ACK, src, values, None)])
                except Exception:  # noqa: BLE001 - as Outbox.send_full: the trees time out and replay
                    log.exception("shared acks: sending %d acks to task %d failed", len(values) // 2, acker)


# ---------------------------------------------------------------- the general strategies

def spout_place(task: SpoutTask) -> Place:
    """A spout starts a tuple tree per tracked emit (``tup_id`` given and ackers present).

    Without ackers (or receivers) a tracked emit is acked as soon as ``next_tuple`` returns
    (``task.ack_now``).
    """
    trees = task.trees
    add_to_each = trees.outbox.add_to_each
    start = trees.start
    tid = task.task_id
    num_ackers = trees.num_ackers
    pending_put = task.pending.put
    ack_now = task.ack_now
    monotonic = time.monotonic

    def place(stream: str, values: Sequence[Any], targets: Sequence[int], tup_id: Any, anchors: Any) -> None:
        if tup_id is not None and num_ackers and targets:
            pending_put(start(targets, stream, tid, values), [tup_id, monotonic(), stream])
        else:
            add_to_each(targets, (stream, tid, values, None))
            if tup_id is not None:
                ack_now.append((tup_id, stream))
        task.emit_count += 1

    return place


def _anchored_place(task: BoltTask) -> Callable[[str, Sequence[Any], Sequence[int], Sequence[Any]], None]:
    """A bolt's emit anchored to any number of Tuples and raw messages, one edge per anchor
    and target; raw messages' edges join the combined acks at once (see ``extend_raw``)."""
    trees = task.trees
    add = trees.outbox.add
    extend_raw = trees.extend_raw
    tid = task.task_id
    getrandbits = _getrandbits

    def place_anchored(stream: str, values: Sequence[Any], targets: Sequence[int], anchors: Sequence[Any]) -> None:
        message = None
        for target in targets:
            out_anchors: dict[int, int] | None = None
            for anchor in anchors:
                if anchor is None:
                    continue
                pairs = anchor[3] if type(anchor) is tuple else anchor._anchors
                if not pairs:
                    continue
                roots = pairs[0::2]
                edge = next_id() if cython.compiled else getrandbits(64)
                if type(anchor) is tuple:  # a raw message: no ack value of its own
                    extend_raw(roots, edge)
                else:
                    anchor._ack_val ^= edge
                if out_anchors is None:
                    out_anchors = {}
                for root in roots:
                    out_anchors[root] = out_anchors.get(root, 0) ^ edge
            if out_anchors is None:
                if message is None:
                    message = (stream, tid, values, None)
                add(target, message)
            else:
                add(target, (stream, tid, values, tuple(_flatten(out_anchors.items()))))

    return place_anchored


def bolt_place(task: BoltTask) -> Place:
    """A bolt extends the trees of its anchors: explicit ``anchors``, else ``anchored()``
    tuples, else (``auto_anchor``) the tuple being processed.

    The tree cannot complete early: the message's own edge is outstanding until it is acked.
    """
    trees = task.trees
    add_to_each = trees.outbox.add_to_each
    edges = trees.edges
    place_anchored = _anchored_place(task)
    tid = task.task_id

    def place(stream: str, values: Sequence[Any], targets: Sequence[int], tup_id: Any, anchors: Any) -> None:
        if anchors is None:
            anchors = task.batch_anchors
            if anchors is None:
                current = task.hand.current
                roots = current._anchors if current is not None and task.auto_anchor else None
                if roots is None:
                    add_to_each(targets, (stream, tid, values, None))
                    return
                if len(roots) != 2:
                    place_anchored(stream, values, targets, (current,))
                    return
                assert current is not None   # the common case: one anchor tuple with one root
                current._ack_val ^= edges(targets, stream, tid, values, roots[0])
                return
        place_anchored(stream, values, targets, anchors)

    return place


# ---------------------------------------------------------------- the fast paths
#
# Compiled (Cython, ``STORMPY_COMPILE=1``), a method called on a value of unknown type, like
# ``cache.get(key)``, is looked up by name per call: about 550 machine instructions where the
# interpreter's specialized call costs a fifth of that. So the closures' state is declared
# (``cython.declare``): the key cache as a dict (its ``get`` is a C lookup), the lists as
# lists (``append`` and indexing inline), sizes and counts as C integers. Interpreted, the
# declarations do nothing.


def fast_spout_emit(task: SpoutTask, route: FastRoute, place: Place, general: EmitFn) -> EmitFn:
    """A spout's ``emit`` for the default stream with plain values: one target inlines ``spout_place``
    (a new tree); the rest goes to ``place`` (other target counts) or ``general`` (any other argument)."""
    cython.declare(nfields=cython.Py_ssize_t, key_index=cython.Py_ssize_t, batch_size=cython.Py_ssize_t, boxes=dict,
                   num_ackers=cython.Py_ssize_t, ticks=Ticks, key_cache=dict, all_inits=list, c_home=cython.ulonglong,
                   root_shift=cython.ulonglong, c_mult=cython.ulonglong, rows=dict)
    select, counter, check_value, ticks, rows = route.select, route.counter, route.check_value, route.ticks, route.rows
    nfields, one_field, key_index, key_cache = route.num_fields, route.num_fields == 1, route.key_index, route.key_cache
    tid, trees, fast_types, getrandbits, monotonic = task.task_id, task.trees, _FAST_TYPES, _getrandbits, time.monotonic
    outbox, lo, hi = trees.outbox, INT_MIN, INT_MAX   # lo, hi: the ints msgpack carries
    boxes, new_box, send_full, batch_size = outbox.boxes, outbox.new_box, outbox.send_full, outbox.batch_size
    num_ackers, all_inits, max_inits, send_inits = trees.num_ackers, trees.inits, trees.max_inits, trees.send_inits
    root_shift, c_mult, c_home = 64 - trees.root_bits, trees.root_mult, trees.root_home   # compiled: C integers

    @cython.locals(r=cython.ulonglong, index=cython.Py_ssize_t, inits=list, root=object, edge=object, box=list)
    def emit(values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        if (stream is not None or anchors is not None or direct_task is not None or need_task_ids
                or type(values) is not list or len(values) != nfields):
            return general(values, tup_id, stream, anchors, direct_task, need_task_ids)
        if one_field:   # one value: no iterator (a third of the check's cost)
            if (t := type(values[0])) is not str and t not in fast_types and not (t is int and lo <= values[0] <= hi):
                check_value(values[0])
        else:
            for value in values:   # an int in range: two comparisons, not a call (see _FAST_TYPES)
                if type(value) not in fast_types and not (type(value) is int and lo <= value <= hi):
                    check_value(value)
        if rows is not None and type(values[0]) is str:   # see new_row
            targets, values = rows.get(values[0]) or new_row(route, values)
        else:   # str keys: a cache
            key = values[key_index] if key_cache is not None else None
            targets = (key_cache.get(key) if type(key) is str else None) or select(values)  # type: ignore[union-attr]
        if len(targets) != 1 or (tup_id is not None and not num_ackers):
            counter[0] += 1
            counter[1] += len(targets)
            place(DEFAULT_STREAM, values, targets, tup_id, None)
            return None
        ticks.append(None)   # one emit, one transfer: counted (compiled, in C: Ticks), added to the counter at flush
        dest = targets[0]
        box = boxes.get(dest)
        if box is None:
            box = new_box(dest)
        if tup_id is None:
            list_put(box, (DEFAULT_STREAM, tid, values, None))   # see Outbox.new_box
        else:
            r = ((_draw() >> root_shift) * c_mult + c_home if cython.compiled
                 else getrandbits(64 - root_shift) * c_mult + c_home)
            root, edge, index = r, (next_id() if cython.compiled else getrandbits(64)), r % num_ackers
            list_put(box, (DEFAULT_STREAM, tid, values, (root, edge)))
            task.pending_live[root] = [tup_id, monotonic(), DEFAULT_STREAM]   # a new root: in no older map
            inits = all_inits[index]
            inits += (root, edge, tid)
            if len(inits) >= max_inits:
                send_inits(index)
        if len(box) >= batch_size:
            send_full(dest)
        task.emit_count += 1
        return None

    return emit


def fast_bolt_emit(task: BoltTask, route: FastRoute, place: Place, general: EmitFn) -> EmitFn:
    """A bolt's ``emit`` for the default stream with plain values: one target and a tuple in
    hand with one root (or none) inlines ``bolt_place``; the rest goes to ``place`` (other
    anchoring) or ``general`` (any other argument)."""
    cython.declare(nfields=cython.Py_ssize_t, key_index=cython.Py_ssize_t, batch_size=cython.Py_ssize_t,
                   one_field=cython.bint, ticks=Ticks, key_cache=dict, hand=Hand, boxes=dict, rows=dict,
                   compiled=cython.bint)
    select, counter, check_value, ticks, rows = route.select, route.counter, route.check_value, route.ticks, route.rows
    nfields, one_field, key_index, key_cache = route.num_fields, route.num_fields == 1, route.key_index, route.key_cache
    fast_types, tid, hand, lo, hi = _FAST_TYPES, task.task_id, task.hand, INT_MIN, INT_MAX   # lo, hi: see above
    outbox = task.trees.outbox
    boxes, new_box, send_full, batch_size = outbox.boxes, outbox.new_box, outbox.send_full, outbox.batch_size
    getrandbits, compiled = _getrandbits, cython.compiled   # interpreted, closure variables are read faster

    @cython.locals(edge=cython.ulonglong, box=list, row=list, targets=list, roots=tuple)
    def emit(values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        if (stream is not None or anchors is not None or direct_task is not None or need_task_ids
                or type(values) is not list or tup_id is not None):
            return general(values, tup_id, stream, anchors, direct_task, need_task_ids)
        row = values   # a list (checked): compiled, its items and length are read directly
        if len(row) != nfields:
            return general(values, tup_id, stream, anchors, direct_task, need_task_ids)
        if one_field:   # one value: no iterator (a third of the check's cost)
            if (t := type(row[0])) is not str and t not in fast_types and not (t is int and lo <= row[0] <= hi):
                check_value(row[0])
        else:
            for value in row:   # an int in range: two comparisons, not a call (see _FAST_TYPES)
                if type(value) not in fast_types and not (type(value) is int and lo <= value <= hi):
                    check_value(value)
        if rows is not None and type(row[0]) is str:   # see new_row
            targets, values = rows.get(row[0]) or new_row(route, values)
        else:   # str keys: a cache
            key = row[key_index] if key_cache is not None else None
            targets = (key_cache.get(key) if type(key) is str else None) or select(values)  # type: ignore[union-attr]
        roots = hand.roots   # the tuple in hand's anchors, see Hand
        if len(targets) != 1 or (roots is not None and len(roots) != 2):
            counter[0] += 1
            counter[1] += len(targets)
            place(DEFAULT_STREAM, values, targets, None, None)
            return None
        ticks.append(None)   # one emit, one transfer: counted (compiled, in C: Ticks), added to the counter at flush
        dest = targets[0]
        box = boxes.get(dest)
        if box is None:
            box = new_box(dest)
        if roots is None:
            list_put(box, (DEFAULT_STREAM, tid, values, None))   # see Outbox.new_box
        else:
            edge = _draw() if compiled else getrandbits(64)
            hand.edges ^= edge
            if compiled:
                list_put(box, (DEFAULT_STREAM, tid, values, (roots[0], edge)))
            else:   # interpreted, box.append is one instruction, list_put (list.append) a call
                box.append((DEFAULT_STREAM, tid, values, (roots[0], edge)))
        if len(box) >= batch_size:
            send_full(dest)
        return None

    return emit
