# What mypy knows of Cython's pure-Python mode names the engine uses (tree.py, drivers.py):
# the decorators keep the decorated function's type, declarations return what they are given.
# The package's own module has no types; pyproject.toml points mypy here ([tool.mypy] mypy_path).
from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

compiled: bool
Py_ssize_t = int
ulonglong = int
bint = bool
p_ulonglong: Any
NULL: Any

def declare(kind: Any = ..., value: Any = ..., **kinds: Any) -> Any: ...
def locals(**kinds: Any) -> Callable[[_F], _F]: ...
def cast(kind: Any, value: Any) -> Any: ...
def sizeof(kind: Any) -> int: ...
def pointer(kind: Any) -> Any: ...
