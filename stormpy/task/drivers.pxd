# Cython declarations for drivers.py (STORMPY_COMPILE=1, setup.py): the receive loop's tuple is
# the extension type of api/tuple.pxd, so its slots are C writes; its counters are C integers.
# ``messages`` stays untyped: a batch may be a list or a tuple (a message envelope off the wire).
# ``shared`` (a source's cache of values, or None) is a dict, so its ``get`` is a C lookup, and
# ``hand`` (``BoltTask.hand``) the extension type of tree.pxd, its fields read in C. A sampled
# tuple is timed by ``_process_timed``, its latencies added by ``_add_latency``: C functions.
# ``_UNSHARED`` (compared with each tuple's reference count, ``_refs``) is a C integer.
import cython
from stormpy.api.tuple cimport ReceivedTuple
from stormpy.task.tree cimport Hand

cdef Py_ssize_t _UNSHARED

@cython.locals(tup=ReceivedTuple, sample=cython.Py_ssize_t, sample_every=cython.Py_ssize_t, execute_ms=dict,
               process_ms=dict, now=cython.double, index=cython.Py_ssize_t, run_start=cython.Py_ssize_t,
               skipped=cython.Py_ssize_t, not_acked=cython.Py_ssize_t, tracked=cython.bint, auto_ack=cython.bint,
               auto_anchor=cython.bint, shared=dict, hand=Hand)
cpdef _deliver(self, messages, list acked, list valued, list state)

@cython.locals(start=cython.double, end=cython.double)
cdef void _process_timed(process, ReceivedTuple tup, double received, bint auto_ack, dict execute_ms,
                         dict process_ms) except *

@cython.locals(entry=list)
cdef void _add_latency(dict table, object key, double ms) except *

cdef object _with_value(object anchors, unsigned long long val, list valued)
