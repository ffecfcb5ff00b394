# Cython declarations for runs.py (STORMPY_COMPILE=1, setup.py): the settled runs' table of C
# 64-bit integers, with a reference to each root's int object.
import cython

cdef unsigned long long _RUNS_MIX
cdef Py_ssize_t _RUNS_MIN

from cpython.ref cimport PyObject
ctypedef PyObject **ObjArray

@cython.final
cdef class Runs:
    cdef dict table
    cdef unsigned long long *roots
    cdef unsigned long long *vals
    cdef PyObject **objs
    cdef readonly Py_ssize_t size, used
    cdef int shift
    cpdef int xor(self, object root, unsigned long long val) except -1
    @cython.locals(i=Py_ssize_t, val=cython.ulonglong)
    cpdef object pop(self, object root)
    cpdef take_into(self, dict pending)
    @cython.locals(roots=cython.p_ulonglong, vals=cython.p_ulonglong, objs=ObjArray, j=Py_ssize_t, most=Py_ssize_t,
                   n=cython.ulonglong, values=list)
    cpdef drain(self, list per_acker)
    cpdef dict snapshot(self)
    @cython.locals(mask=cython.ulonglong, i=cython.ulonglong)
    cdef Py_ssize_t _slot(self, unsigned long long r) noexcept
    @cython.locals(i=Py_ssize_t)
    cdef Py_ssize_t _find(self, object root) noexcept
    cdef int _put(self, object root, unsigned long long r, unsigned long long val) except -1
    @cython.locals(old_roots=cython.p_ulonglong, old_vals=cython.p_ulonglong, old_objs=ObjArray,
                   old_size=Py_ssize_t, old_shift=cython.int, old_used=Py_ssize_t, j=Py_ssize_t, i=Py_ssize_t)
    cdef int _grow(self) except -1
    @cython.locals(roots=cython.p_ulonglong, vals=cython.p_ulonglong, objs=ObjArray)
    cdef int _make(self, Py_ssize_t size) except -1
    @cython.locals(j=Py_ssize_t)
    cdef void _release(self) noexcept

