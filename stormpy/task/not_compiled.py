"""What the ``cython`` module gives pure-Python-mode code where Cython is not installed: the
module runs interpreted, and its declarations change nothing (as with Cython's own
``Cython.Shadow`` when it is installed)."""
from typing import Any, Callable

compiled = False
#: C types named in declarations: interpreted, the Python type each value has anyway.
Py_ssize_t = int
ulonglong = int
bint = bool


def declare(kind: Any = None, value: Any = None, **kinds: Any) -> Any:
    """``x = cython.declare(type, value)`` or ``cython.declare(name=type, ...)``: interpreted,
    just ``value`` (None for the second spelling)."""
    return value


def locals(**kinds: Any) -> Callable[[Any], Any]:   # noqa: A001 - Cython's name
    """``@cython.locals(name=type, ...)``: interpreted, the function as it is."""
    return lambda function: function
