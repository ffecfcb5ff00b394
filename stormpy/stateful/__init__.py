"""Stateful bolts with checkpointed state (DESIGN section 12): ``StatefulBolt``, ``KeyValueState``."""
from __future__ import annotations

from stormpy.stateful.bolt import StatefulBolt
from stormpy.stateful.state import KeyValueState, open_state
from stormpy.stateful.windowed import StatefulWindowedBolt

__all__ = ["KeyValueState", "StatefulBolt", "StatefulWindowedBolt", "open_state"]
