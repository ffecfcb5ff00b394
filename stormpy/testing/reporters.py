"""A reporter that holds back the "error kept" callbacks, for testing what a spout settles when.

A spout that skips a record (undecodable, or given up after its retries) settles it in the
``then`` of ``report_error`` (see :mod:`stormpy.api.contract`), so that a crash before the error
is kept re-reads the record instead of losing the report. :class:`HeldReporter` stands for a
ZooKeeper slow to take errors: the spout must hold the record until ``release()``.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from stormpy.local.runner import LocalReporter


class HeldReporter(LocalReporter):
    """Keeps every report's ``then`` until ``release()``; everything else as ``stormpy local``'s reporter."""

    def __init__(self, keep: int = 10) -> None:
        super().__init__(keep)
        self._lock = threading.Lock()
        self.held: list[Callable[[], object]] = []

    def report_error(self, component_id: str, task_id: int, text: str,
                     then: Callable[[], object] | None = None) -> None:
        super().report_error(component_id, task_id, text)
        if then is not None:
            with self._lock:
                self.held.append(then)

    def release(self) -> int:
        """Run the held callbacks (the executor's ``call_soon`` brings each to its thread); how many."""
        with self._lock:
            held, self.held = self.held, []
        for then in held:
            then()
        return len(held)
