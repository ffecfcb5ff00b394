# Cython declarations for tuple.py (STORMPY_COMPILE=1, setup.py): Tuple and ReceivedTuple as
# extension types whose slots are C fields, written directly by the compiled receive loop
# (task/drivers.pxd). Keep the fields in step with Tuple.__slots__. The ack value (XOR of 64-bit
# edge ids), the receive time and the done flag are C values: the loop sets, XORs and tests them
# per tuple without making or testing a Python object (8,401 -> 8,328 machine instructions a word,
# the local word count at parallelism 2).
cdef class Tuple:
    cdef public object component, stream, task, values, _id, _anchors, _skey
    cdef public unsigned long long _ack_val
    cdef public double _recv
    cdef public bint _done

cdef class ReceivedTuple(Tuple):
    pass
