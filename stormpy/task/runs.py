"""The settled runs of a batch's acks, compiled in a table of C integers (``TupleTrees.settle_runs``,
``tree.py``): see :class:`Runs`."""
from __future__ import annotations

from typing import Any

try:
    import cython   # compiled, a constant of the compiler: the interpreted branches are not built
except ImportError:   # Cython is only needed to build: interpreted without it, the same answers
    from stormpy.task import not_compiled as cython   # type: ignore[no-redef]  # the same names

if cython.compiled:   # the C table
    from cython.cimports.cpython.ref import Py_DECREF, Py_INCREF, PyObject
    from cython.cimports.libc.stdlib import calloc, free


#: A ``Runs`` table's smallest size (slots; a power of two) and the multiplier spreading its
#: keys (roots of one acker, ``home_acker``, share their residue modulo the acker count).
_RUNS_MIN = 256
_RUNS_MIX = 0x9E3779B97F4A7C15


class Runs:
    """The settled runs of ``TupleTrees.settle_runs`` since the last flush: root -> XOR of its
    runs' values, beside ``pending`` (a root's combined value is the XOR of both; the flush
    sends one pair a root, see :meth:`take_into`).

    Why not ``pending``, the dict: a run cost ~685 machine instructions there (the root's
    hash twice, a lookup, an int made of the value, an insert into a dict that grows from
    empty after every flush), and the local word count settles two runs a sentence at
    parallelism 1 and three at 2 (the split's and each count task's). Compiled, this is an
    open-addressing table of C 64-bit integers (``tree.pxd``, linear probing, at most half
    full), which also holds a reference to each root's int object: the drain hands the acker
    the object the tree started with, which the acker's and the spout's dicts find by identity
    (new int objects of the same values cost ~30 instructions a word in comparisons). The local
    word count (compiled, callgrind, 42,000 sentences minus 2,000) cost 7,697 -> 7,540
    instructions a word at parallelism 1 and 7,714 -> 7,476 at 2, first-level cache misses
    as before (54-55 a word). Interpreted, a dict, and ``settle_runs`` writes
    ``pending`` inline and leaves this empty. A root or value outside 0..2**64-1, or the root
    0, raises OverflowError: the caller settles it into ``pending``."""

    __slots__ = ("table", "roots", "vals", "objs", "size", "shift", "used")
    # compiled, C fields (tree.pxd): per slot the root (0: empty), its value and its int object;
    # the number of slots (a power of two), 64 - log2 of it, the roots in them; interpreted, a dict
    table: dict[int, int]
    roots: Any
    vals: Any
    objs: Any
    size: int
    shift: int
    used: int

    def __init__(self) -> None:
        if not cython.compiled:
            self.table = {}

    def __dealloc__(self) -> None:
        if cython.compiled:
            self._release()
            free(self.roots)
            free(self.vals)
            free(self.objs)

    def xor(self, root: int, val: int) -> int:
        """``root``'s value ^= ``val`` (a new root takes ``val``)."""
        if cython.compiled:
            if type(root) is not int:   # an int subclass would convert, and :meth:`pop` not find it
                raise OverflowError("only exact ints are settled in runs")
            return self._put(root, root, val)
        self.table[root] = self.table.get(root, 0) ^ val
        return 0

    def pop(self, root: int) -> int:
        """``root``'s value (0 if it has none), which it no longer has."""
        if not cython.compiled:
            return self.table.pop(root, 0)
        i = self._find(root)
        if i < 0:
            return 0
        val: int = self.vals[i]
        self.vals[i] = 0   # the slot keeps its root until the drain
        return val

    def take_into(self, pending: dict[int, int]) -> None:
        """Each of ``pending``'s roots takes its value from here, so that the flush sends one
        ``root, value`` pair a root. Two pairs would reach the acker one after the other, and a
        part can be zero where the sum is not: an acked tuple's edge in ``pending`` (settled
        one at a time after an id outside 64 bits) sent before its children's edges here would
        complete the tree early."""
        if self:
            for root in pending:
                pending[root] ^= self.pop(root)

    def __len__(self) -> int:
        return self.used if cython.compiled else len(self.table)

    def drain(self, per_acker: list[list[int]]) -> None:
        """The non-zero values, as ``root, value`` pairs, onto their ackers' lists (``root %
        len(per_acker)``); empties the table (compiled, back to its smallest size when it was
        mostly empty: a drain walks every slot)."""
        if not cython.compiled:
            add_pending(per_acker, self.table)
            return
        n = len(per_acker)
        if self.used == 0 or n == 0:
            return
        roots, vals, objs = self.roots, self.vals, self.objs
        most = self.used
        try:
            for j in range(self.size):
                if roots[j] != 0:
                    if vals[j] != 0:   # the root's own int object: the acker and the spout find it by identity
                        values = per_acker[roots[j] % n]
                        values.append(cython.cast(object, objs[j]))
                        values.append(vals[j])
                    Py_DECREF(cython.cast(object, objs[j]))
                    roots[j] = vals[j] = 0
                    objs[j] = cython.NULL
                    self.used -= 1
        except BaseException:   # (MemoryError) emptied slots would break the rest's probe chains
            self._make(self.size)   # the rest goes: its trees time out and replay
            raise
        if self.size > _RUNS_MIN and most * 8 < self.size:
            try:
                self._make(_RUNS_MIN)
            except MemoryError:
                pass   # the emptied table stays as large as it was

    def snapshot(self) -> dict[int, int]:
        """The non-zero values as a dict (tests)."""
        if not cython.compiled:
            return {root: val for root, val in self.table.items() if val}
        return {self.roots[j]: self.vals[j] for j in range(self.size) if self.roots[j] != 0 and self.vals[j] != 0}

    # compiled only (tree.pxd): the C table
    def _slot(self, r: int) -> int:
        """The slot of ``r``, or of the empty slot where it would go (linear probing; the
        table is never full)."""
        mask = self.size - 1
        i = (r * _RUNS_MIX) >> self.shift
        while self.roots[i] != r and self.roots[i] != 0:
            i = (i + 1) & mask
        return i

    def _find(self, root: int) -> int:
        """The slot of ``root``, or -1 (also for an int that fits no slot)."""
        if self.size == 0 or type(root) is not int or root <= 0 or root >= 2**64:
            return -1
        i = self._slot(root)
        return i if self.roots[i] != 0 else -1

    def _put(self, root: int, r: int, val: int) -> int:
        """``root`` (an int object; ``r`` its value) ^= ``val``."""
        if r == 0:
            raise OverflowError("the root 0 is settled in pending")
        if self.size == 0:
            self._make(_RUNS_MIN)
        i = self._slot(r)
        if self.roots[i] == r:
            self.vals[i] ^= val
            return 0
        if (self.used + 1) * 2 > self.size:   # grown first: a failed grow changes nothing
            self._grow()
            i = self._slot(r)
        self.roots[i] = r
        self.vals[i] = val
        Py_INCREF(root)
        self.objs[i] = cython.cast(cython.pointer(PyObject), root)
        self.used += 1
        return 0

    def _grow(self) -> int:
        """Twice the slots, the entries moved."""
        old_roots, old_vals, old_objs, old_size, old_shift, old_used = (
            self.roots, self.vals, self.objs, self.size, self.shift, self.used)
        self.roots = self.vals = cython.NULL
        self.objs = cython.NULL
        self.size = 0
        try:
            self._make(2 * old_size)
        except MemoryError:
            self.roots, self.vals, self.objs = old_roots, old_vals, old_objs
            self.size, self.shift, self.used = old_size, old_shift, old_used
            raise
        for j in range(old_size):
            if old_roots[j] != 0:
                i = self._slot(old_roots[j])
                self.roots[i], self.vals[i], self.objs[i] = old_roots[j], old_vals[j], old_objs[j]
        self.used = old_used
        free(old_roots)
        free(old_vals)
        free(old_objs)
        return 0

    def _make(self, size: int) -> int:
        """Empty arrays of ``size`` slots (a power of two) in place of the table's."""
        roots = cython.cast(cython.p_ulonglong, calloc(size, cython.sizeof(cython.ulonglong)))
        vals = cython.cast(cython.p_ulonglong, calloc(size, cython.sizeof(cython.ulonglong)))
        objs = cython.cast(cython.pointer(cython.pointer(PyObject)), calloc(size, cython.sizeof(cython.pointer(PyObject))))
        if roots == cython.NULL or vals == cython.NULL or objs == cython.NULL:
            free(roots)
            free(vals)
            free(objs)
            raise MemoryError()
        self._release()
        free(self.roots)
        free(self.vals)
        free(self.objs)
        self.roots, self.vals, self.objs, self.size, self.used = roots, vals, objs, size, 0
        self.shift = 64
        while size > 1:
            size >>= 1
            self.shift -= 1
        return 0

    def _release(self) -> None:
        """The references the table holds to its roots' int objects, given back."""
        if self.objs == cython.NULL:
            return
        for j in range(self.size):
            if self.objs[j] != cython.NULL:
                Py_DECREF(cython.cast(object, self.objs[j]))
                self.objs[j] = cython.NULL


def add_pending(per_acker: list[list[int]], pending: dict[int, int]) -> None:
    """``pending``'s non-zero values, as ``root, value`` pairs, onto their ackers' lists; clears it."""
    n = len(per_acker)
    for root, val in pending.items():
        if val:
            values = per_acker[root % n]
            values.append(root)
            values.append(val)
    pending.clear()
