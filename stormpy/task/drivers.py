"""Drivers: how a bolt executor feeds received batches to one bolt task.

The component chooses its driver (``Bolt.make_driver(task)``), so the executor needs no
probes of the component for framework behaviour. Three drivers exist:

- :class:`TupleDriver` (every ``Bolt``): one ``Tuple`` per message, ``process(tup)`` per
  tuple, then auto-ack (``auto_ack``) — the per-tuple hot path.
- :class:`BatchingDriver` (``BatchingBolt`` and its subclasses): the same loop, but acks are
  the bolt's business (after ``process_batch``); ``pending()`` lists the tuples waiting in
  batches and ``before_close()`` runs them.
- :class:`RawBatchDriver` (framework bolts: the acker, Trident's bolts): the whole batch of
  raw messages ``(stream, src_task, values, anchors)`` goes to one function. The bolt may
  keep messages, ack or fail them later (``Bolt.ack_message`` / ``Bolt.fail_message``) and
  emit anchored to them (``emit(..., anchors=[message, ...])``).

Every driver has ``on_messages(messages)``, ``pending()`` and ``before_close()``; all run on
the executor thread. An exception out of ``on_messages`` crashes the task (the executor
reports it, fails ``pending()`` and re-creates the component); messages not yet handled are
kept in ``task.backlog`` for the new instance.
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from stormpy.api.component import DRIVERS
from stormpy.api.tuple import ReceivedTuple, Tuple
from stormpy.task.tree import Anchors, Hand, keep_shared

try:
    import cython   # compiled, a constant of the compiler: the interpreted branch is not built
except ImportError:   # Cython is only needed to build: interpreted without it, the same answer
    from stormpy.task import not_compiled as cython   # type: ignore[no-redef]  # the same names

if TYPE_CHECKING:
    from stormpy.api.contract import BoltOutputCollector
    from stormpy.task.bolt_executor import BoltTask

log = logging.getLogger(__name__)

_tuple_new = tuple.__new__
#: A received tuple with no ``__init__`` run (the receive loop stores its slots): interpreted,
#: calling the class (its ``__init__`` is object's, 40 ns) beats ``ReceivedTuple.__new__(...)``
#: (63 ns); compiled, that spelling is the extension type's allocation alone.
_new_tuple = ReceivedTuple
_monotonic = time.monotonic
if cython.compiled:   # the count read in C: calling sys.getrefcount cost ~130 machine instructions a tuple
    from cython.cimports.cpython.ref import Py_REFCNT as _refs
    from cython.cimports.stormpy.task.capi import list_put, list_with_room   # lists with room: capi.pxd
else:
    _refs = sys.getrefcount
    from stormpy.task.capi import list_put, list_with_room


def _unshared_refs() -> int:
    """What ``_refs`` (the reference count) says, in this build, of a received tuple that only the
    receive loop's local and ``Hand.current`` hold (interpreted, ``sys.getrefcount``'s argument
    counts too).

    A tuple ``process`` did not keep (stored, held for a later ack, batched) is such a tuple
    when the loop takes the next message, and the loop reuses it, storing the new message's
    fields over the old: no allocation and no free per message (about 250 machine
    instructions a tuple, compiled; 15 ns interpreted). A tuple anything else refers to is
    left alone and a new one made, as is one no longer in hand (``hand.current`` moved: the
    count would then miss a reference elsewhere). -1 (no reuse) if this interpreter's counts do
    not see one more holder as one more reference."""
    hand = Hand()
    probe = ReceivedTuple.__new__(ReceivedTuple) if cython.compiled else _new_tuple()
    hand.current = probe
    alone: int = _refs(probe)
    extra = [probe]   # one more holder
    return alone if _refs(probe) == alone + len(extra) else -1


#: ``_refs`` of a tuple only the receive loop holds: it may be reused (``_unshared_refs``)
_UNSHARED = _unshared_refs()


def _share(shared: dict[str, Any], cls: type, values: Sequence[Any]) -> Any:
    """The values tuple of a one-field message holding a short string, kept for the next
    message with the same string.

    Streams repeat their values (words, keys, ids), and a named tuple costs a third of a
    received tuple (1,500 machine instructions, callgrind) where a dict hit costs a tenth
    of that. Values are immutable, so tuples sharing them cannot tell; only ``str`` is
    shared (``1``, ``1.0`` and ``True`` are equal keys of different types).
    """
    return keep_shared(shared, values[0], _tuple_new(cls, values))


class Driver:
    """Base: what a bolt executor calls for one task. Subclasses define ``on_messages``."""

    #: Named in crash reports ("component x task 3 raised in process").
    where = "process"
    #: Whether consecutive queued batches for the task may reach ``on_messages`` as one call
    #: (``BoltExecutor._take_joined``). Only for drivers that lose nothing by it when the
    #: component crashes mid-call: a TupleDriver keeps the unprocessed rest in ``task.backlog``
    #: for the new instance, where a raw-batch bolt would lose a joined batch it never saw.
    joins = False

    def on_messages(self, messages: list[Any]) -> None:
        """Handle one received batch of ``(stream, src_task, values, anchors)`` messages."""
        raise NotImplementedError

    def pending(self) -> list[Any]:
        """Tuples (or raw messages) the task holds unacked beyond ``held``: failed on a crash."""
        return []

    def before_close(self) -> None:
        """Hand over held-back work now (drain at shutdown, before ``close``)."""


class TupleDriver(Driver):
    """One Tuple and one ``process`` call per message; acks settled once per batch.

    No locks and no per-tuple queue operations: per message one Tuple and, with ``auto_ack``,
    its anchors appended to a list (with its ack value in its edge, ``_with_value``; a tuple of
    several roots also on a second list with its value); the batch's acks are settled together by
    the executor's ``TupleTrees`` (``settle_runs``: consecutive tuples of one tree, like a
    sentence's words, combine without touching its dict).
    """

    joins = True

    def __init__(self, task: BoltOutputCollector, component: Any, auto_ack: bool | None = None) -> None:
        self.task: BoltTask = cast("BoltTask", task)   # drivers are engine code: the task itself
        self.executor = self.task.executor
        self.trees = self.task.trees
        self.process: Callable[[Tuple], None] = component.process
        self.auto_ack = bool(component.auto_ack) if auto_ack is None else auto_ack
        # what a sampled tuple records into (the receive loop reads them once per batch)
        stats = self.executor.stats
        self._execute_ms, self._process_ms = stats.execute_ms, stats.process_ms
        self._sample_every: int = self.executor.settings.sample_every

    def on_messages(self, messages: list[Any]) -> None:
        # the acked tuples' anchors (one root: value in the edge; compiled, a list with room for a
        # batch's: capi.pxd), and several roots' (anchors, non-0 value): settled at the end
        acked: list[Anchors] = list_with_room(len(messages) if self.auto_ack and self.trees.num_ackers else 0)
        valued: list[tuple[Anchors, int]] = []
        # where the loop stopped: [stats key, its run's first index, skipped in the run,
        # not auto-acked in the run, index reached (the message that raised, else the end)]
        state: list[Any] = [None, 0, 0, 0, 0]
        try:
            _deliver(self, messages, acked, valued, state)
        except Exception:
            rest = messages[state[4] + 1:]
            if rest:
                self.task.backlog.append(rest)
            raise
        finally:
            if acked:
                self.trees.settle_runs(acked, valued)
            key, start, skipped, not_acked, stop = state
            self._count(key, stop - start - skipped, not_acked)

    def _count(self, key: Any, executed: int, not_acked: int) -> None:
        self.executor.count(key, executed, executed - not_acked)

def _deliver(self: TupleDriver, messages: list[Any], acked: list[Anchors], valued: list[tuple[Anchors, int]],
             state: list[Any]) -> None:
    """The per-tuple loop; executed and acked tuples are counted per stats key run (no int per tuple)."""
    task, ex, process, auto_ack, held = self.task, self.executor, self.process, self.auto_ack, self.task.held
    tracked, now, sample, auto_anchor = bool(self.trees.num_ackers), _monotonic(), ex.sample_countdown, task.auto_anchor
    sample_every, execute_ms, process_ms, hand = self._sample_every, self._execute_ms, self._process_ms, task.hand
    cur_key = last_src = last_stream = component_id = cls = named = tup = shared = cast(Any, None)   # shared: dict
    run_start = skipped = not_acked = index = 0
    try:
        for index, message in enumerate(messages):
            stream, src, values, anchors = message
            if (src is not last_src or stream is not last_stream) and (src != last_src or stream != last_stream):
                info = ex.source_info(task, message)
                if info is None:
                    last_src, skipped = None, skipped + 1   # the locals no longer match last_src
                    continue
                component_id, cls, skey, shared = info
                last_src, last_stream = src, stream
                if skey is not cur_key:
                    self._count(cur_key, index - run_start - skipped, not_acked)
                    cur_key, run_start, skipped, not_acked = skey, index, 0, 0
            if type(values) is cls:   # the emitter's shared values tuple (tree.new_row)
                named = values
            elif shared is not None and len(values) == 1 and type(values[0]) is str:
                named = shared.get(values[0]) or _share(shared, cls, values)
            else:
                named = _tuple_new(cls, values)
            if tup is None or hand.current is not tup or _refs(tup) != _UNSHARED:   # see _UNSHARED
                tup = ReceivedTuple.__new__(ReceivedTuple) if cython.compiled else _new_tuple()   # see _new_tuple
            tup.component, tup.stream, tup.task = component_id, stream, src
            tup.values, tup._anchors, tup._skey = named, anchors, cur_key
            tup._id, tup._ack_val, tup._recv, tup._done = None, 0, 0.0, False
            hand.current = tup   # task.current
            if auto_anchor:
                hand.roots = anchors
            if (sample := sample - 1):
                process(tup)
            else:
                _process_timed(process, tup, now, auto_ack, execute_ms, process_ms)
                sample = sample_every
            if hand.edges:   # emitted from tup by the fast emit: into its ack value
                tup._ack_val ^= hand.edges
                hand.edges = 0
            if tup._done:   # acked or failed in process
                not_acked += 1
            elif auto_ack:
                tup._done = True
                if anchors is not None and tracked:   # emitted: its ack value joins (_with_value)
                    if cython.compiled:   # into the room list_with_room made (capi.pxd)
                        list_put(acked, _with_value(anchors, tup._ack_val, valued) if tup._ack_val else anchors)
                    else:   # interpreted, acked.append is one instruction, list_put (list.append) a call
                        acked.append(_with_value(anchors, tup._ack_val, valued) if tup._ack_val else anchors)
            else:
                held[id(tup)] = tup
                not_acked += 1
        hand.current, index = None, len(messages)
    finally:
        hand.roots, hand.edges = None, 0   # a raise leaves tup in hand: on_crash fails it, edges and all
        ex.sample_countdown = sample if sample > 0 else sample_every   # 0: a sampled tuple raised
        state[:] = (cur_key, run_start, skipped, not_acked, index)


def _with_value(anchors: Anchors, val: int, valued: list[tuple[Anchors, int]]) -> Anchors:
    """What an acked tuple that emitted is settled with: of one root, its edge XOR its ack value,
    which ``settle_runs`` takes with the rest of the tree's run (it was a second pass: one more
    dict update a tuple, a sentence in the word count's split bolt); of several roots, its
    anchors, and ``(anchors, value)`` onto ``valued``."""
    if len(anchors) == 2:
        return (anchors[0], anchors[1] ^ val)
    valued.append((anchors, val))
    return anchors


def _process_timed(process: Callable[[Tuple], None], tup: ReceivedTuple, received: float, auto_ack: bool,
                   execute_ms: dict[Any, list[float]], process_ms: dict[Any, list[float]]) -> None:
    """``process`` one of the sampled tuples, timing it: its execute latency, and its process
    latency (received -> ack) when it is auto-acked right after. A tuple acked later records
    its process latency then (``BoltTask.ack``, from ``_recv``)."""
    start = _monotonic()
    tup._recv = received
    process(tup)
    end = _monotonic()
    key = tup._skey
    _add_latency(execute_ms, key, (end - start) * 1000.0)
    if auto_ack and not tup._done:
        _add_latency(process_ms, key, (end - received) * 1000.0)


def _add_latency(table: dict[Any, list[float]], key: Any, ms: float) -> None:
    """``Stats.add_latency`` of one latency, for the receive loop's sampled tuples: compiled, a
    C function over a typed dict and list (the stats method is an interpreted call: with the
    driver method that timed the tuple before, a sampled tuple cost ~7,000 machine instructions
    more than another, 3.9% of a word at one tuple in 20; now ~1,000)."""
    entry = table.get(key)
    if entry is None:
        table[key] = [ms, 1]
    else:
        entry[0] += ms
        entry[1] += 1


class BatchingDriver(TupleDriver):
    """For ``BatchingBolt``: tuples wait in the bolt's batches and are acked after ``process_batch``."""

    def __init__(self, task: BoltOutputCollector, component: Any) -> None:
        super().__init__(task, component, auto_ack=False)
        self.component = component

    def pending(self) -> list[Any]:
        return list(self.component.pending_tuples())

    def before_close(self) -> None:
        self.component.flush_batches()


class RawBatchDriver(Driver):
    """Whole batches of raw messages to ``on_batch(messages)``, for framework bolts.

    What the bolt may do with a message ``m = (stream, src_task, values, anchors)`` it got:

    - keep it, and later ``ack_message(m)`` (its tree edges are settled, with every edge
      emitted anchored to it) or ``fail_message(m)`` (its trees fail at once); a message
      neither acked nor failed times its trees out, as an unacked Tuple would;
    - emit anchored to any number of kept messages: ``emit(values, stream=s,
      anchors=[m1, m2, ...], direct_task=t)``; each new edge joins the executor's combined
      acks at once (a raw message keeps no ack value of its own);
    - list what it holds in ``pending`` (failed if the task crashes) and flush held-back work
      in ``before_close``.
    """

    where = "process_messages"

    def __init__(self, on_batch: Callable[[list[Any]], None],
                 pending: Callable[[], list[Any]] | None = None,
                 before_close: Callable[[], None] | None = None, joins: bool = False) -> None:
        self._on_batch = on_batch
        self.joins = joins
        self._pending = pending
        self._before_close = before_close

    def on_messages(self, messages: list[Any]) -> None:
        self._on_batch(messages)

    def pending(self) -> list[Any]:
        return self._pending() if self._pending is not None else []

    def before_close(self) -> None:
        if self._before_close is not None:
            self._before_close()


# The API's own bolts ask for these by name (``Bolt.make_driver``): the user API imports no engine.
DRIVERS.update(tuple=TupleDriver, batching=BatchingDriver)
