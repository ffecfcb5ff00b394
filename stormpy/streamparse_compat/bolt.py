"""Bolt classes at streamparse's/pystorm's module path (``streamparse.bolt``, ``pystorm.bolt``)."""
from __future__ import annotations

from stormpy.api.component import BatchingBolt, Bolt, TicklessBatchingBolt
from stormpy.api.tuple import Tuple
from stormpy.api.foreign import JavaBolt, ShellBolt

__all__ = ["BatchingBolt", "Bolt", "JavaBolt", "ShellBolt", "TicklessBatchingBolt", "Tuple"]
