"""Lists with room: the interpreted stand-ins for ``capi.pxd`` (read there why).

Compiled modules cimport ``list_with_room`` and ``list_put`` from ``capi.pxd`` (inline C);
interpreted they are these: a plain list, and the list's own ``append`` called as a function.
That is a method-descriptor call, where ``box.append(x)`` is one specialized instruction: the
per-word places (the bolt's fast emit, the receive loop's acked list) keep ``append``
interpreted; the rest (a spout's emit, ``Outbox.add``, ``TupleTrees.edges``) call this.
"""
from __future__ import annotations

from typing import Any

list_put = list.append


def list_with_room(n: int) -> list[Any]:
    """An empty list (compiled: with room for ``n`` items)."""
    return []
