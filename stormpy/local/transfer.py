"""In-process transfer for ``stormpy local``: a batch for a task goes straight to its queue.

Executors call ``send(task_id, messages)`` from their own threads; the runtime's
``receive`` puts the whole batch on the destination executor's queue (one queue operation
per batch, never per tuple). Values are not encoded here: executors already checked at emit
time that every value would survive msgpack, so a topology behaves the same as in a cluster.
"""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class LocalTransfer:
    """Delivers batches to the executors of one in-process WorkerRuntime."""

    def __init__(self) -> None:
        self._receive: Any = None

    def bind(self, runtime: Any) -> None:
        """Attach the runtime (it needs the transfer at construction, so this comes after)."""
        self._receive = runtime.receive

    def send(self, task_id: int, messages: list[Any]) -> None:
        self._receive(task_id, messages)
