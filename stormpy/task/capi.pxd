# Lists with room, for the compiled tuple path (cimported in pure-Python mode under
# ``if cython.compiled``: ``from cython.cimports.stormpy.task.capi import ...``; interpreted,
# ``capi.py`` stands in). Declarations and inline functions only: no module is built from this.
#
# Why: a list that ``append`` grows from empty is copied to a larger block every few items (it
# grows by an eighth), and each copy writes first-level cache lines that were not in the cache.
# In the local word count (compiled) the engine's per-batch lists grew that way: a received
# batch's acked anchors (``TupleDriver.on_messages``), the fast emits' count (``tree.Ticks``,
# now a C integer) and each destination's outgoing batch (``Outbox.new_box``). Callgrind's cache
# simulation put 2.8 of a counted word's 44.3 first-level data cache misses at parallelism 2,
# and 1.8 of 40.2 at 1, under ``PyList_Append``'s growth (two batches growing side by side, as
# at parallelism 2, cannot grow in place). Made with room and filled by ``list_put``: 40.5 and
# 38.0 misses a word, a larger drop than the growth calls were charged with (the rest is not
# attributed); instructions within the runs' own movement. In time, par 2 counted 3.6% more
# words/s, par 1 the same (medians of six alternating pairs).
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF

cdef extern from "Python.h":
    ctypedef struct PyListObject:
        Py_ssize_t allocated   # the item slots the list has room for (its length is Py_SIZE)
    void Py_SET_SIZE(object ob, Py_ssize_t size)
    Py_ssize_t Py_SIZE(object ob)


cdef inline list list_with_room(Py_ssize_t n):
    """An empty list with room for ``n`` items (``PyList_New`` makes ``n`` empty slots)."""
    cdef list room = PyList_New(n)
    Py_SET_SIZE(room, 0)
    return room


cdef inline int list_put(list items, object item) except -1:
    """``items.append(item)``, into the list's room while it has some: ``list.append`` on a
    list less than half full would give the room back. ``items`` must be a list, not None
    (Cython lets None through a ``list`` argument; every caller passes a list it made)."""
    cdef Py_ssize_t n = Py_SIZE(items)
    if n < (<PyListObject*>items).allocated:
        Py_INCREF(item)   # PyList_SET_ITEM takes the reference it is given
        PyList_SET_ITEM(items, n, item)
        Py_SET_SIZE(items, n + 1)
    else:
        items.append(item)
    return 0
