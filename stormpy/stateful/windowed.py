"""``StatefulWindowedBolt``: Storm's ``IStatefulWindowedBolt`` with persistent windows.

A :class:`~stormpy.windowing.bolt.WindowedBolt` whose windows, and a KeyValueState of the
user's own (``init_state(state)``), are checkpointed by the protocol of
:class:`~stormpy.stateful.bolt.StatefulBolt`:

- at every ``PREPARE`` the window manager's contents (the tuples' component, stream, task and
  values, their timestamps, the trigger position and the watermark) are written to the state
  under the reserved key ``"$window"``, and committed with the user's own changes;
- a tuple is acked once the checkpoint that holds it (in the window) committed, not when it
  leaves its last window (Storm's stateful windowing). The submit-time check that window
  length + slide fit in the message timeout still applies (kept conservative);
- after a crash or a worker restart, ``INITSTATE`` restores the windows from the last commit
  and the tuples since then replay: the next windows hold every tuple.

Restored tuples carry their values (``t.values.<field>``) but no tuple tree: emits in
``process_window`` are anchored only to the window's tuples still waiting for their commit.
Values must be JSON-able.
"""
from __future__ import annotations

import logging
from typing import Any

from stormpy.stateful.bolt import StatefulBolt
from stormpy.stateful.state import KeyValueState
from stormpy.api.tuple import Tuple, values_class
from stormpy.windowing import windows as w
from stormpy.windowing.bolt import WindowedBolt

log = logging.getLogger(__name__)

#: The state key holding the windows (left alone by user code).
WINDOW_STATE_KEY = "$window"


class StatefulWindowedBolt(StatefulBolt, WindowedBolt):
    """Windows that survive a restart, plus ``init_state(state)``: implement ``process_window``."""

    def _encode(self, tup: Tuple) -> list[Any]:
        return [tup.component, tup.stream, tup.task, list(tup.values)]

    def _decode(self, item: list[Any]) -> Tuple:
        component, stream, task, values = item
        try:
            fields = self._stormpy_context.get_output_fields(stream, component)
            values = values_class(component, stream, fields)(*values)
        except (KeyError, TypeError):   # the topology changed: keep the raw values
            log.warning("%s: restored window tuple of %s/%s no longer matches its fields",
                        self._stormpy_context.component_id, component, stream)
        tup = Tuple(None, component, stream, task, values)
        tup._done = True   # acked when its checkpoint committed, by the predecessor
        return tup

    def _before_prepare(self, txid: int, state: KeyValueState) -> None:
        state.put(WINDOW_STATE_KEY, self._window_manager().snapshot(self._encode))

    def _restore(self, state: KeyValueState) -> None:
        snap = state.get(WINDOW_STATE_KEY)
        if snap:
            self._window_manager().restore(snap, self._decode)
            log.info("%s task %s: windows restored (%d tuples)", self._stormpy_context.component_id,
                     self._stormpy_context.task_id, len(snap["released"]) + len(snap["waiting"]))

    def _on_activation(self, window: w.Window) -> None:
        # Anchor only to tuples not acked yet: an edge anchored to an acked tuple never settles.
        with self.anchored([t for t in window.get() if not t._done]):
            self.process_window(window)
