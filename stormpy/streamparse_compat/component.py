"""``Component``, ``Tuple`` and ``StormHandler`` at streamparse's/pystorm's module path.

``StormHandler`` is pystorm's logging handler that forwards records to Storm's log; here
components log in-process already, so it hands records to the ``stormpy.component`` logger.
"""
from __future__ import annotations

import logging

from stormpy.api.component import Component
from stormpy.api.tuple import Tuple

log = logging.getLogger(__name__)


class StormHandler(logging.Handler):
    """pystorm's handler: records go to the worker's own log (``stormpy.component``)."""

    def __init__(self, stream: object = None) -> None:  # pystorm passes the Storm output stream
        super().__init__()
        self._target = logging.getLogger("stormpy.component")

    def emit(self, record: logging.LogRecord) -> None:
        if self._target.isEnabledFor(record.levelno):
            self._target.handle(record)


__all__ = ["Component", "StormHandler", "Tuple"]
