"""The one emit path: an executor's Outbox and the anchoring strategies spouts and bolts use.

Every emit, of every component, is the same four steps (DESIGN sections 2 and 6):

1. check the stream, the arity and that every value will serialize;
2. choose the target tasks (the stream's grouping, or ``direct_task``);
3. anchor: make one message ``(stream, src_task, values, anchors)`` per target, where the
   anchoring strategy decides ``anchors`` — a spout *starts* a tuple tree (a new root, an edge
   per target, ``__ack_init`` to the acker), a bolt *extends* the trees of the tuples it is
   anchored to (an edge per target XORed into each anchor's ack value);
4. append each message to the Outbox, which hands a destination's batch to the transfer
   when it is full; count the emit.

``make_emit(task, place, starts_trees)`` builds a task's ``emit`` from its strategy's ``place``
function (``spout_place`` or ``bolt_place``): a general path for every case, and a short path
for the common one (default stream, a list of plain scalars) whose closure variables replace
attribute lookups — it runs once per emitted tuple. Everything here runs on the executor
thread that owns the Outbox.
"""
from __future__ import annotations

import logging
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from stormpy.serialization import SCALARS, SerializationError
from stormpy.streams import ACK_INIT, DEFAULT_STREAM
from stormpy.api.tuple import Tuple

log = logging.getLogger(__name__)

#: ``(stream, src_task, values, anchors)``; anchors is None or {root id: edge id}.
Message = tuple
#: ``place(stream, values, targets, tup_id, anchors)``: step 3 and 4 of one emit.
Place = Callable[[str, list, Sequence[int], Any, Any], None]

_getrandbits = random.getrandbits
# Value types the short path accepts without a call; ints need a range check.
_FAST_TYPES = frozenset({str, float, bool, type(None), bytes})


class EmitError(ValueError):
    """An emit the topology does not allow (undeclared stream, wrong arity, bad direct task)."""


class Outbox:
    """Per-destination batches of messages of one executor (its thread only).

    A destination's batch goes to ``send(dest, messages)`` (the transfer) as soon as it holds
    ``batch_size`` messages; :meth:`flush` sends the partly filled ones. ``boxes`` is public so
    that the emit short paths can append with local variables; it is cleared in place, never
    replaced, so such references stay valid.
    """

    __slots__ = ("boxes", "batch_size", "_send", "_name")

    def __init__(self, send: Callable[[int, list], None], batch_size: int, name: str) -> None:
        self.boxes: defaultdict[int, list[Message]] = defaultdict(list)
        self.batch_size = batch_size
        self._send = send
        self._name = name

    def __bool__(self) -> bool:
        return bool(self.boxes)

    def __len__(self) -> int:
        """Messages waiting (approximate when called from another thread)."""
        return sum(len(v) for v in list(self.boxes.values()))

    def add(self, dest: int, message: Message) -> None:
        box = self.boxes[dest]
        box.append(message)
        if len(box) >= self.batch_size:
            self.send_full(dest)

    def add_to_each(self, targets: Sequence[int], message: Message) -> None:
        """The same (unanchored) message to every target."""
        boxes = self.boxes
        batch_size = self.batch_size
        for dest in targets:
            box = boxes[dest]
            box.append(message)
            if len(box) >= batch_size:
                self.send_full(dest)

    def add_tree_edges(self, targets: Sequence[int], stream: str, src: int, values: list, root: int) -> int:
        """One message per target anchored to ``{root: new edge}``; returns the XOR of the edges.

        The anchored half of every emit of a tree with one root (a spout's new tree, a bolt's
        emit from a tuple with one root): the caller XORs the result into the ack-init value or
        into the anchor tuple's ack value.
        """
        boxes = self.boxes
        batch_size = self.batch_size
        getrandbits = _getrandbits
        acc = 0
        for dest in targets:
            edge = getrandbits(64)
            acc ^= edge
            box = boxes[dest]
            box.append((stream, src, values, {root: edge}))
            if len(box) >= batch_size:
                self.send_full(dest)
        return acc

    def send_full(self, dest: int) -> None:
        """Hand one destination's batch to the transfer now."""
        messages = self.boxes.pop(dest)
        try:
            self._send(dest, messages)
        except Exception:
            log.exception("executor %s: transfer to task %d failed; %d messages lost",
                          self._name, dest, len(messages))

    def flush(self) -> None:
        """Hand every partly filled batch to the transfer."""
        boxes = self.boxes
        for dest in list(boxes):
            self.send_full(dest)


# ---------------------------------------------------------------- checks and targets

def check_emit(task: Any, route: Any, stream: str, values: Any) -> None:
    """Arity and serializability of emitted values (raises EmitError/SerializationError)."""
    if route is None:
        raise EmitError(f"component {task.component_id!r} emitted on undeclared stream {stream!r}")
    if not isinstance(values, (list, tuple)):
        raise SerializationError(f"tuple values must be a list or tuple, got {type(values).__name__}")
    if len(values) != route.num_fields:
        raise EmitError(f"component {task.component_id!r} emitted {len(values)} values on stream "
                        f"{stream!r}, which declares {route.num_fields} fields")
    check = task.executor.serialization.check_value
    for value in values:
        if type(value) not in SCALARS or type(value) is int:
            check(value)


def direct_targets(task: Any, route: Any, stream: str, direct_task: int | None) -> list[int]:
    if direct_task is None:
        raise EmitError(f"stream {stream!r} of {task.component_id!r} is direct: emit needs direct_task")
    if not route.direct:
        raise EmitError(f"direct_task given for stream {stream!r} of {task.component_id!r}, "
                        f"which is not declared direct")
    return [direct_task] if direct_task in route.direct_tasks else []


# ---------------------------------------------------------------- anchoring strategies

def spout_place(task: Any) -> Place:
    """A spout starts a tuple tree per tracked emit (``tup_id`` given and ackers present).

    Root id and edge ids are random 64-bit ints; the acker task ``acker_tasks[root % n]`` gets
    ``__ack_init(root, xor of the edges, spout task)`` and the task's pending map remembers
    ``[tup_id, start time, stream]`` until the acker answers or the tree times out. Without
    ackers a tracked emit is acked as soon as ``next_tuple`` returns (``task.ack_now``).
    """
    ex = task.executor
    outbox = ex.outbox
    boxes = outbox.boxes
    batch_size = outbox.batch_size
    send_full = outbox.send_full
    add_to_each = outbox.add_to_each
    add_tree_edges = outbox.add_tree_edges
    tid = task.task_id
    ackers = ex.acker_tasks
    num_ackers = ex.num_ackers
    pending_put = task.pending.put
    ack_now = task.ack_now
    getrandbits = _getrandbits
    monotonic = time.monotonic

    def place(stream: str, values: list, targets: Sequence[int], tup_id: Any, anchors: Any) -> None:
        if tup_id is not None and num_ackers and targets:
            root = getrandbits(64)
            val = add_tree_edges(targets, stream, tid, values, root)
            pending_put(root, [tup_id, monotonic(), stream])
            dest = ackers[root % num_ackers]
            box = boxes[dest]  # Outbox.add, inlined: once per tracked spout emit
            box.append((ACK_INIT, tid, [root, val, tid], None))
            if len(box) >= batch_size:
                send_full(dest)
        else:
            add_to_each(targets, (stream, tid, values, None))
            if tup_id is not None:
                ack_now.append((tup_id, stream))
        task.emit_count += 1

    return place


def bolt_place(task: Any) -> Place:
    """A bolt extends the trees of its anchors: explicit ``anchors``, else ``anchored()``
    tuples, else (``auto_anchor``) the tuple being processed.

    For each target a new edge id is XORed into every anchor's ack value (sent when the anchor
    is acked) and the message carries ``{root: edge}`` for each of the anchors' roots. A raw
    message (a Python tuple, as raw-batch drivers receive them) has no ack value to keep: the
    edge joins the executor's combined pending acks at once, which reaches the acker with the
    same XOR (the tree cannot complete early: the message's own edge is still outstanding).
    """
    ex = task.executor
    outbox = ex.outbox
    add = outbox.add
    add_to_each = outbox.add_to_each
    add_tree_edges = outbox.add_tree_edges
    pending = ex.pending_acks
    tid = task.task_id
    getrandbits = _getrandbits

    def place_anchored(stream: str, values: list, targets: Sequence[int], anchors: Sequence[Any]) -> None:
        message = None
        for target in targets:
            out_anchors: dict[int, int] | None = None
            for anchor in anchors:
                if anchor is None:
                    continue
                if type(anchor) is tuple:  # a raw message
                    roots = anchor[3]
                    if not roots:
                        continue
                    edge = getrandbits(64)
                    for root in roots:
                        pending[root] = pending.get(root, 0) ^ edge
                else:
                    roots = anchor._anchors
                    if not roots:
                        continue
                    edge = getrandbits(64)
                    anchor._ack_val ^= edge
                if out_anchors is None:
                    out_anchors = {}
                for root in roots:
                    out_anchors[root] = out_anchors.get(root, 0) ^ edge
            if out_anchors is None:
                if message is None:
                    message = (stream, tid, values, None)
                add(target, message)
            else:
                add(target, (stream, tid, values, out_anchors))

    def place(stream: str, values: list, targets: Sequence[int], tup_id: Any, anchors: Any) -> None:
        if anchors is None:
            anchors = task.batch_anchors
            if anchors is None:
                current = task.current
                roots = current._anchors if current is not None and task.auto_anchor else None
                if roots is None:
                    add_to_each(targets, (stream, tid, values, None))
                    return
                if len(roots) != 1:
                    place_anchored(stream, values, targets, (current,))
                    return
                (root,) = roots  # the common case: one anchor tuple with one root
                current._ack_val ^= add_tree_edges(targets, stream, tid, values, root)
                return
        place_anchored(stream, values, targets, anchors)

    return place


# ---------------------------------------------------------------- emit

def debug_emit(task: Any, emit: Any) -> Any:
    """``topology.debug``: log every emitted tuple (always the general, slower path)."""

    def logged(values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
               direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        targets = emit(values, tup_id, stream, anchors, direct_task, True)
        log.info("emitted: component %s task %d stream %s values %r to tasks %s",
                 task.component_id, task.task_id, stream or DEFAULT_STREAM, values, targets)
        return targets if need_task_ids else None

    return logged


def make_emit(task: Any, place: Place, starts_trees: bool) -> Any:
    """The task's ``emit(values, tup_id=None, stream=None, anchors=None, direct_task=None,
    need_task_ids=False)`` over the anchoring strategy ``place``.

    ``starts_trees``: spouts (``tup_id`` names the tree; ``anchors`` are ignored). For bolts a
    string ``tup_id`` is pystorm's positional stream (bolts have no tuple ids of their own), and
    ``anchors`` may hold Tuples, raw messages, or tuple ids of held tuples.
    """
    ex = task.executor
    routes = task.routes
    stream_counter = ex.stats.stream_counter
    check_value = ex.serialization.check_value

    def general(values: Sequence[Any], tup_id: Any = None, stream: str | None = None, anchors: Any = None,
                direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        if not starts_trees:
            if stream is None and isinstance(tup_id, str):
                stream = tup_id
            tup_id = None
            if anchors is not None:
                if isinstance(anchors, Tuple):   # one Tuple (iterable as pystorm's namedtuple)
                    anchors = [anchors]
                anchors = [a if isinstance(a, Tuple) or type(a) is tuple else task.resolve(a) for a in anchors]
        if stream is None:
            stream = DEFAULT_STREAM
        route = routes.get(stream)
        if route is None or type(values) is not list or len(values) != route.num_fields:
            check_emit(task, route, stream, values)
            values = list(values)
        else:
            for value in values:
                if type(value) not in SCALARS or type(value) is int:
                    check_value(value)
        if direct_task is not None or route.direct:
            targets = direct_targets(task, route, stream, direct_task)
        else:
            targets = route.select(values)
        place(stream, values, targets, tup_id, anchors)
        counter = stream_counter(stream)
        counter[0] += 1
        counter[1] += len(targets)
        return list(targets) if need_task_ids else None

    if ex.settings.debug:
        return debug_emit(task, general)
    route = routes.get(DEFAULT_STREAM)
    if route is None or route.direct:
        return general
    select = route.select
    nfields = route.num_fields
    counter = stream_counter(DEFAULT_STREAM)
    fast_types = _FAST_TYPES
    key_cache = getattr(select, "key_cache", None)  # fields grouping on one field
    key_index = getattr(select, "key_index", 0)
    bolt = not starts_trees
    tid = task.task_id
    boxes = ex.outbox.boxes
    batch_size = ex.outbox.batch_size
    send_full = ex.outbox.send_full
    getrandbits = _getrandbits
    monotonic = time.monotonic
    num_ackers = ex.num_ackers
    ackers = ex.acker_tasks
    pending_put = task.pending.put if starts_trees else None

    def emit(values: Any, tup_id: Any = None, stream: str | None = None, anchors: Any = None,
             direct_task: int | None = None, need_task_ids: bool = False) -> list[int] | None:
        if (stream is not None or anchors is not None or direct_task is not None or need_task_ids
                or type(values) is not list or len(values) != nfields or (bolt and tup_id is not None)):
            return general(values, tup_id, stream, anchors, direct_task, need_task_ids)
        for value in values:
            if type(value) not in fast_types:
                check_value(value)
        if key_cache is not None:
            key = values[key_index]
            targets = key_cache.get(key) if type(key) is str else None
            if targets is None:
                targets = select(values)
        else:
            targets = select(values)
        counter[0] += 1
        counter[1] += len(targets)
        # The strategies' common case, inlined (no call): one target (shuffle, fields) and a
        # tree with one root — the tuple being processed, or the spout's new tree.
        if len(targets) == 1:
            if bolt:
                current = task.current
                if current is None or not task.auto_anchor:
                    roots = None
                else:
                    roots = current._anchors
                if task.batch_anchors is None and (roots is None or len(roots) == 1):
                    dest = targets[0]
                    box = boxes[dest]
                    if roots is None:
                        box.append((DEFAULT_STREAM, tid, values, None))
                    else:
                        edge = getrandbits(64)
                        current._ack_val ^= edge
                        (root,) = roots
                        box.append((DEFAULT_STREAM, tid, values, {root: edge}))
                    if len(box) >= batch_size:
                        send_full(dest)
                    return None
            elif tup_id is None or num_ackers:
                dest = targets[0]
                box = boxes[dest]
                if tup_id is None:
                    box.append((DEFAULT_STREAM, tid, values, None))
                else:
                    root, edge = getrandbits(64), getrandbits(64)
                    box.append((DEFAULT_STREAM, tid, values, {root: edge}))
                    pending_put(root, [tup_id, monotonic(), DEFAULT_STREAM])
                    acker = ackers[root % num_ackers]
                    init = boxes[acker]
                    init.append((ACK_INIT, tid, [root, edge, tid], None))
                    if len(init) >= batch_size:
                        send_full(acker)
                if len(box) >= batch_size:
                    send_full(dest)
                task.emit_count += 1
                return None
        place(DEFAULT_STREAM, values, targets, tup_id, None)
        return None

    return emit
