# Cython declarations for tree.py (STORMPY_COMPILE=1, setup.py): the tuple-tree id generator
# in C integers (splitmix64, see tree.py), and the tuple in hand's edges as a C integer. The fast emit closures declare their own state in
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

@cython.locals(old=object, c_old=cython.ulonglong)
cdef void _settle_run(dict pending, object root, unsigned long long val) except *
