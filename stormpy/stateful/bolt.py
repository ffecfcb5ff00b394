"""``StatefulBolt``: Storm's ``IStatefulBolt`` run the way ``StatefulBoltExecutor`` runs it.

The user implements ``init_state(state)`` (a :class:`~stormpy.stateful.state.KeyValueState`
restored from the last committed checkpoint) and ``process(tup)``, updating the state as they
go. The checkpoint spout (``stormpy.stateful.checkpoint``) sends ``[txid, action]`` on
``$checkpoint`` to every task; this module is the bolt side of Storm's protocol, all on the
executor thread:

- tuples that arrive before ``INITSTATE`` wait (held, unprocessed); ``INITSTATE`` calls
  ``init_state`` once and then processes them;
- a processed tuple is not acked: it joins the *uncommitted* list (so does a tuple the user
  acks explicitly). ``PREPARE txid`` writes the state's changes as the prepared set of txid
  and moves the uncommitted tuples to the *prepared* list; ``COMMIT txid`` commits the set and
  only then acks the prepared tuples. So a tuple is acked once the checkpoint that includes
  its update committed: a crash before that rolls the state back and the tuple replays;
- ``ROLLBACK`` reloads the committed state and fails the prepared and uncommitted tuples
  (they replay); ``PREPARE`` reaching a task that has not been initialized (it was
  re-created after a crash) fails the checkpoint, which makes the spout roll back and send
  ``INITSTATE``.

The checkpoint tuple is acked after its action is done, so the spout sees ``PREPARE``
complete only when every stateful bolt task prepared, and only then sends ``COMMIT``.
Emits are anchored to the input tuple as in any bolt, so downstream trees complete too.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.api.contract import BoltOutputCollector, ComponentEngine
from stormpy.stateful.checkpoint import COMMIT, INITSTATE, PREPARE, ROLLBACK
from stormpy.stateful.state import KeyValueState, open_state
from stormpy.streams import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM
from stormpy.api.component import Bolt
from stormpy.task.drivers import Driver, TupleDriver
from stormpy.api.tuple import Tuple

log = logging.getLogger(__name__)


class StatefulDriver(TupleDriver):
    """A TupleDriver without auto-ack whose per-tuple call is the bolt's checkpoint-aware one."""

    def __init__(self, task: BoltOutputCollector, component: "StatefulBolt") -> None:
        super().__init__(task, component, auto_ack=False)
        self.process = component._stateful_process


def state_namespace(stormconf: Mapping[str, Any], context: Any) -> str:
    """``<topology-name>/<component>/<task>``: what a re-created task or worker finds again."""
    name = stormconf.get(cfg.TOPOLOGY_NAME.name) or getattr(context, "topology_name", "") or "topology"
    return f"{name}/{context.component_id}/{context.task_id}"


class StatefulBolt(Bolt):
    """A bolt with a checkpointed ``KeyValueState``: implement ``init_state`` and ``process``."""

    #: compile_topology adds the checkpoint spout for topologies with a component marked so.
    is_stateful = True

    #: The framework's handle on the state (``state`` itself belongs to user code: it is set to
    #: the same object before ``initialize`` and the user may overwrite it, e.g. with
    #: ``self.state = None`` in ``initialize`` and ``self.state = state`` in ``init_state``).
    _stormpy_state: KeyValueState | None = None
    _initialized = False
    state: Any = None

    # ------------------------------------------------------------ user hooks (Storm's names)
    def init_state(self, state: KeyValueState) -> None:
        """Receive the state (restored from the last commit) before the first ``process``."""

    def pre_prepare(self, txid: int) -> None:
        """Storm's ``prePrepare``: called before the state's changes are prepared for ``txid``."""

    def pre_commit(self, txid: int) -> None:
        """Storm's ``preCommit``: called before the prepared changes of ``txid`` are committed."""

    def pre_rollback(self) -> None:
        """Storm's ``preRollback``: the state is about to be reset to its last commit
        (drop anything derived from uncommitted updates)."""

    # ------------------------------------------------------------ engine side (executor thread)
    def make_driver(self, task: BoltOutputCollector) -> Driver:
        return StatefulDriver(task, self)

    def _attach(self, task: ComponentEngine, component_id: str, task_id: int) -> None:
        super()._attach(task, component_id, task_id)
        self._initialized = False
        self._waiting: list[Tuple] = []
        self._uncommitted: dict[int, Tuple] = {}
        self._prepared: list[Tuple] = []

    def _set_context(self, stormconf: Mapping[str, Any], context: Any) -> None:
        super()._set_context(stormconf, context)
        # Opened before initialize: a COMMIT of a predecessor's prepared set may come before INITSTATE.
        self._stormpy_state = open_state(stormconf, state_namespace(stormconf, context))
        self.state = self._stormpy_state
        log.debug("stateful bolt %s task %s: state opened (pid %d)", context.component_id, context.task_id, os.getpid())

    def _before_prepare(self, txid: int, state: KeyValueState) -> None:
        """Framework hook (stateful windows): put what must survive into ``state`` now."""

    def _restore(self, state: KeyValueState) -> None:
        """Framework hook (stateful windows): take back what ``_before_prepare`` saved."""

    def _stateful_process(self, tup: Tuple) -> None:
        if tup.stream == CHECKPOINT_STREAM and tup.component == CHECKPOINT_COMPONENT:
            self._on_checkpoint(tup)
        elif not self._initialized:
            self._waiting.append(tup)   # held by the driver: failed if the task crashes
        else:
            self._run(tup)

    def _run(self, tup: Tuple) -> None:
        self.process(tup)
        if not tup._done:
            self._uncommitted[id(tup)] = tup

    def ack(self, tup: Tuple) -> None:
        """Acks wait for the checkpoint that covers ``tup`` to commit (Storm's stateful bolts)."""
        if isinstance(tup, Tuple) and not tup._done:
            self._uncommitted[id(tup)] = tup

    def fail(self, tup: Tuple) -> None:
        """Fail ``tup`` now: its tree replays."""
        if isinstance(tup, Tuple):
            self._uncommitted.pop(id(tup), None)
        self._stormpy_collector.fail(tup)

    def _on_checkpoint(self, tup: Tuple) -> None:
        txid, action = int(tup.values[0]), tup.values[1]
        state = self._stormpy_state
        assert state is not None
        task = self._stormpy_collector
        if action == PREPARE:
            if not self._initialized:
                log.info("%s task %s: PREPARE %d before INITSTATE (task re-created): failing it to recover",
                         self._stormpy_context.component_id, self._stormpy_context.task_id, txid)
                task.fail(tup)
                return
            self.pre_prepare(txid)
            self._before_prepare(txid, state)
            state.prepare_commit(txid)
            self._prepared.extend(self._uncommitted.values())
            self._uncommitted = {}
        elif action == COMMIT:
            self.pre_commit(txid)
            state.commit(txid)
            prepared, self._prepared = self._prepared, []
            for held in prepared:
                task.ack(held)
        elif action == ROLLBACK:
            if self._initialized:
                self.pre_rollback()
            state.rollback()
            doomed = self._prepared + list(self._uncommitted.values())
            self._prepared, self._uncommitted = [], {}
            for held in doomed:
                task.fail(held)
            if doomed:
                log.info("%s task %s: rolled back to the last commit; %d tuple(s) failed for replay",
                         self._stormpy_context.component_id, self._stormpy_context.task_id, len(doomed))
        elif action == INITSTATE:
            if not self._initialized:
                self._restore(state)
                self.init_state(state)
                self._initialized = True
                waiting, self._waiting = self._waiting, []
                for held in waiting:
                    with task.processing(held):   # emits while processing it anchor to it
                        self._run(held)
        else:
            log.warning("%s task %s: unknown checkpoint action %r ignored", self._stormpy_context.component_id, self._stormpy_context.task_id, action)
        task.ack(tup)

    def close(self) -> None:
        """Release the state's store (subclasses overriding close should call ``super().close()``)."""
        if self._stormpy_state is not None:
            self._stormpy_state.close()
            self._stormpy_state = None
