# Cython declarations for drivers.py (STORMPY_COMPILE=1, setup.py): the receive loop's tuple is
# the extension type of api/tuple.pxd, so its slots are C writes; its counters are C integers.
# ``messages`` stays untyped: a batch may be a list or a tuple (a message envelope off the wire).
import cython
from stormpy.api.tuple cimport ReceivedTuple

@cython.locals(tup=ReceivedTuple, sample=cython.Py_ssize_t, index=cython.Py_ssize_t, run_start=cython.Py_ssize_t,
               skipped=cython.Py_ssize_t, not_acked=cython.Py_ssize_t, tracked=cython.bint, auto_ack=cython.bint,
               auto_anchor=cython.bint)
cpdef _deliver(self, messages, list acked, list vals, list state)
