"""What the ``cython`` module gives pure-Python-mode code where Cython is not installed: the
module runs interpreted, and its declarations change nothing (as with Cython's own
``Cython.Shadow`` when it is installed)."""
from typing import Any, Callable

compiled = False
#: C types named in declarations: interpreted, the Python type each value has anyway.
Py_ssize_t = int
ulonglong = int
bint = bool
#: Names only compiled code reaches (``runs.Runs``' C table): present, as in ``Cython.Shadow``.
p_ulonglong: Any = None
NULL: Any = None


def cast(kind: Any, value: Any) -> Any:
    """``cython.cast(type, value)``: interpreted, ``value``."""
    return value


def sizeof(kind: Any) -> int:
    """``cython.sizeof(type)``: interpreted, a pointer's size."""
    return 8


def pointer(kind: Any) -> Any:
    """``cython.pointer(type)``: interpreted, nothing to declare."""
    return None


def declare(kind: Any = None, value: Any = None, **kinds: Any) -> Any:
    """``x = cython.declare(type, value)`` or ``cython.declare(name=type, ...)``: interpreted,
    just ``value`` (None for the second spelling)."""
    return value


def locals(**kinds: Any) -> Callable[[Any], Any]:   # noqa: A001 - Cython's name
    """``@cython.locals(name=type, ...)``: interpreted, the function as it is."""
    return lambda function: function
