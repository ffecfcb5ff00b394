"""Spout classes at streamparse's/pystorm's module path (``streamparse.spout``, ``pystorm.spout``)."""
from __future__ import annotations

from stormpy.api.component import ReliableSpout, Spout
from stormpy.api.foreign import JavaSpout, ShellSpout

__all__ = ["JavaSpout", "ReliableSpout", "ShellSpout", "Spout"]
