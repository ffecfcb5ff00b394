# Cython declarations for tree.py (STORMPY_COMPILE=1, setup.py): the tuple-tree id generator
# in C integers (splitmix64, see tree.py) and the tuple in hand's edges as a C integer; the
# settled runs' table of C integers is runs.pxd's. The fast emit closures declare their own state in
# the .py (``cython.declare``): Cython does not take ``@cython.locals`` here for a function
# that makes a closure.
import cython

cdef unsigned long long _id_state, _MASK, _GAMMA, _MIX1, _MIX2

@cython.locals(z=cython.ulonglong)
cdef unsigned long long _draw() noexcept

cpdef object next_id()

cdef class Hand:
    cdef public object current
    cdef public object roots
    cdef public unsigned long long edges

@cython.final
cdef class Ticks:
    cdef public Py_ssize_t n
    cpdef void append(self, object item) noexcept
    cpdef void clear(self) noexcept


from stormpy.task.runs cimport Runs

cdef void _xor_run(dict pending, Runs runs, object root, object val) except *
