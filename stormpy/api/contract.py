"""The component contract: everything a spout or bolt may call on the engine that runs it.

A component never sees its executor. Before ``initialize`` the executor attaches one object
per task (``Component._attach``) that implements one of the protocols below, and components
(the user API, Trident's bolts, the Spark sink, stateful and windowed bolts) call only what is
written here. The engine (``stormpy.task``: ``SpoutTask``/``BoltTask``) implements them; this
module imports nothing of it, so the user API depends on a contract, not on the engine.

Storm's split is followed: ``ISpoutOutputCollector`` (emit, report errors, pending count) for
spouts and ``IOutputCollector`` (emit anchored, ack, fail, report errors) for bolts; like
Heron's component delegate, the same object also answers for the task's identity and context.

Threads: every method runs on the task's executor thread (the thread that calls the
component's hooks), except :meth:`ComponentEngine.call_soon`, which any thread may call to get
work onto that thread.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from stormpy.api.tuple import Tuple

__all__ = ["BoltDriver", "BoltOutputCollector", "ComponentEngine", "IOutputCollector", "ISpoutOutputCollector",
           "OutputCollector", "RawMessage", "SpoutOutputCollector"]

#: A raw message as raw-batch drivers (the acker, Trident's bolts) receive it:
#: ``(stream, source task, values, anchors)``, anchors ``None`` or ``(root id, edge id, ...)``.
RawMessage = tuple[str, int, list[Any], tuple[int, ...] | None]


@runtime_checkable
class ComponentEngine(Protocol):
    """What every task offers its component: identity, emit, errors, the executor thread."""

    @property
    def task_id(self) -> int:
        """This task's id in the topology."""
        ...

    @property
    def component_id(self) -> str:
        """The component's id in the topology."""
        ...

    @property
    def context(self) -> Mapping[str, Any]:
        """The ``TopologyContext`` handed to ``initialize`` (a dict with attributes)."""
        ...

    def emit(self, values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        """Emit one tuple (see ``Component.emit``); the receiving task ids when ``need_task_ids``."""
        ...

    def report_error(self, text: str, then: Callable[[], object] | None = None) -> None:
        """Keep ``text`` as this task's newest error (the UI shows it); the task lives on.

        ``then`` runs later on the executor thread, once the error is kept where the UI reads it
        (ZooKeeper, in a cluster) or given up on (rate limit or a full queue, ZooKeeper away: it
        stays in the log). It is dropped if this instance crashed meanwhile (or asked from
        ``close()``), and a raise in it crashes the task like the component's own code.
        A spout that skips a bad record settles it only then: a crash in between re-reads the
        record and reports it again, instead of committing past an error nobody will see."""
        ...

    def mark_reported(self, exc: BaseException) -> None:
        """``exc`` is about to escape and was already reported: the crash handler must not repeat it."""
        ...

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on this task's executor thread soon; safe from any thread."""
        ...


@runtime_checkable
class SpoutOutputCollector(ComponentEngine, Protocol):
    """A spout task (Storm's ``ISpoutOutputCollector``): an emit with ``tup_id`` starts a tuple tree."""

    def pending_count(self) -> int:
        """Tuple trees of this task not yet acked, failed or timed out (Storm's ``getPendingCount``)."""
        ...


@runtime_checkable
class BoltOutputCollector(ComponentEngine, Protocol):
    """A bolt task (Storm's ``IOutputCollector``): emits extend the trees of their anchors.

    Anchors are Tuples, raw messages (raw-batch drivers) or ids of tuples the task holds.
    Each tuple is settled once: the first ``ack`` or ``fail`` counts, later ones are ignored.
    """

    def ack(self, tup: Tuple | Any) -> None:
        """``tup`` is fully processed here: its edges (and those emitted anchored to it) settle."""
        ...

    def ack_many(self, tups: Iterable[Tuple]) -> None:
        """``ack`` every Tuple of ``tups`` not yet settled, in one pass (batching bolts)."""
        ...

    def fail(self, tup: Tuple | Any) -> None:
        """Fail the tuple trees of ``tup`` now: each spout's ``fail`` runs for its tuple."""
        ...

    def anchored(self, tups: Iterable[Any]) -> AbstractContextManager[None]:
        """Within the block, emits without ``anchors=`` are anchored to every tuple of ``tups``."""
        ...

    def processing(self, tup: Tuple) -> AbstractContextManager[None]:
        """Within the block, ``tup`` is the tuple in hand: auto-anchored emits anchor to it, and a
        crash fails it (stateful bolts replaying tuples that waited for their state). On an
        exception ``tup`` stays the tuple in hand, so the crash handler fails it."""
        ...

    def ack_message(self, message: RawMessage) -> None:
        """Raw-batch drivers: settle a raw message's edges."""
        ...

    def fail_message(self, message: RawMessage) -> None:
        """Raw-batch drivers: fail a raw message's tuple trees at once."""
        ...

    def ack_messages(self, messages: list[RawMessage]) -> None:
        """Raw-batch drivers: ``ack_message`` for a whole batch, in one pass (the Spark sink)."""
        ...

    def count_executed(self, key: tuple[str, str], n: int) -> None:
        """Raw-batch drivers that take messages as rows: ``n`` of (component, stream) executed."""
        ...

    def send(self, dest: int, message: RawMessage) -> None:
        """Framework bolts (the acker): queue a ready-made message for task ``dest``."""
        ...


@runtime_checkable
class BoltDriver(Protocol):
    """What the engine calls on the object a bolt's ``make_driver`` returns (the other way round
    from the collectors: the engine feeds the component through it). The engine's drivers
    (``stormpy.task.drivers``) implement it; declaring it here keeps the user API from naming
    engine classes."""

    #: Named in crash reports ("component x task 3 raised in process").
    where: str

    def on_messages(self, messages: list[Any]) -> None:
        """Handle one received batch of ``(stream, src_task, values, anchors)`` messages."""
        ...

    def pending(self) -> list[Any]:
        """Tuples (or raw messages) held unacked beyond ``held``: failed on a crash."""
        ...

    def before_close(self) -> None:
        """Hand over held-back work now (drain at shutdown, before ``close``)."""
        ...


#: Storm's names for the same contracts.
IOutputCollector = BoltOutputCollector
ISpoutOutputCollector = SpoutOutputCollector
#: Storm's ``OutputCollector`` is the bolt's.
OutputCollector = BoltOutputCollector
