"""Bolt classes at streamparse's/pystorm's module path (``streamparse.bolt``, ``pystorm.bolt``)."""
from __future__ import annotations

from stormpy.task.component import BatchingBolt, Bolt, TicklessBatchingBolt
from stormpy.task.tuple import Tuple
from stormpy.topology.foreign import JavaBolt, ShellBolt

__all__ = ["BatchingBolt", "Bolt", "JavaBolt", "ShellBolt", "TicklessBatchingBolt", "Tuple"]
