# Cython declarations for tuple.py (STORMPY_COMPILE=1, setup.py): Tuple and ReceivedTuple as
# extension types whose slots are C fields, written directly by the compiled receive loop
# (task/drivers.pxd). Keep the fields in step with Tuple.__slots__.
cdef class Tuple:
    cdef public object component, stream, task, values, _id, _anchors, _ack_val, _recv, _done, _skey

cdef class ReceivedTuple(Tuple):
    pass
