"""The receive door of the tuple transport: a frame from a peer worker decoded, checked and
handed to the runtime (DESIGN section 5, "Transport"; the transfer's receive thread calls it).

Why a module of its own: what may come in on the worker's port is anything, and this is the
one place that decides what of it reaches an executor. A frame that does not decode, or whose
envelopes are not ``[task_id, ...]``, raises (the receive loop counts and logs it:
:meth:`ReceiveDoor.bad_frame`); single messages of the wrong shape (:func:`well_formed`) or
that a registered serializer could not decode are dropped from their batch, counted, reported
as the claimed sender's error (rate-limited) and, when anchored, their trees failed through the
acker so the spout replays them. A batch arrives as columns (``stormpy.worker.wire``, checked per
run) or as ``[task_id, [message, ...]]`` (checked per message); control messages go to their
handlers (``CONTROL_TASK``). The transport's sockets, threads and counters stay in
``stormpy.worker.transfer``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

import msgpack

from stormpy.serialization import contains_undecodable
from stormpy.streams import ACK_FAIL, ACK_INIT, ACKER_STREAMS
from stormpy.worker import wire

log = logging.getLogger(__name__)

CONTROL_TASK = -1
"""Virtual port of control messages; real task ids start at 1."""

_FOUR = {4}


class DeliveryError(Exception):
    """The runtime raised while taking a well-formed batch: a framework failure of this worker,
    not a peer's bad frame, so the receive loop lets its guard report it."""


class ReceiveDoor:
    """Decodes and checks the frames of one worker's receive thread (that thread only).

    ``receive(task_id, messages)`` is the runtime's; ``report(src_task, text)`` reports an error
    as a task's (it must not raise); ``fail_trees(message)`` fails a dropped message's tuple
    trees; ``control`` maps a control message's kind to its handler; ``serialization`` is the
    topology's registered serializers, or None (plain msgpack, the fast path); ``counters`` the
    transfer's, which this door adds to."""

    def __init__(self, receive: Callable[[int, Any], None], *, counters: MutableMapping[str, int],
                 report: Callable[[int, str], None], fail_trees: Callable[[Any], None],
                 control: dict[str, Callable[..., None]], serialization: Any = None) -> None:
        self._receive = receive
        self._counters = counters
        self._report = report
        self._fail_trees = fail_trees
        self._control = control
        self._serialization = serialization

    def take(self, frame: bytes) -> None:
        """Hand the frame's batches to the runtime; raises on a frame that is not one (the
        caller counts it, :meth:`bad_frame`), or :class:`DeliveryError` if the runtime raised."""
        undecodable: list[Exception] = []
        if self._serialization is not None:
            envelopes, undecodable = self._serialization.unpackb_lenient(frame)
        else:
            # use_list=False: messages arrive as tuples (the contract) at no extra cost; values
            # become tuples too, which executors wrap like lists.
            envelopes = msgpack.unpackb(frame, strict_map_key=False, raw=False, use_list=False)
        if not isinstance(envelopes, (list, tuple)):
            raise ValueError(f"frame is a {type(envelopes).__name__}, not a list of envelopes")
        for envelope in envelopes:
            if not isinstance(envelope, (list, tuple)) or type(envelope[0]) is not int:
                raise ValueError("envelope is not [task_id, ...]")
            task_id = envelope[0]
            messages: Any
            if len(envelope) == 4 and task_id != CONTROL_TASK:   # a batch as columns (wire.py)
                messages, check_each = wire.decode(envelope)   # checked per run, acker streams per message
            elif len(envelope) == 2 and isinstance(envelope[1], (list, tuple)):
                messages, check_each = envelope[1], True
            else:
                raise ValueError("envelope is neither [task_id, [message, ...]] nor a batch")
            if task_id == CONTROL_TASK:
                self._on_control(messages)
                continue
            if undecodable:
                messages = self._drop_undecodable(task_id, messages)
            if not messages:
                continue
            if check_each:
                # one C-level pass instead of a Python loop: every message must be a 4-sequence
                if set(map(len, messages)) != _FOUR:
                    raise ValueError(f"a message for task {task_id} is not (stream, src, values, anchors)")
                if not all(map(well_formed, messages)):
                    messages = self._drop_malformed(task_id, messages)
                    if not messages:
                        continue
            self._counters["received_messages"] += len(messages)
            try:
                self._receive(task_id, messages)
            except Exception as exc:
                raise DeliveryError(f"handing {len(messages)} message(s) to task {task_id} failed: "
                                    f"{type(exc).__name__}: {exc}") from exc

    def bad_frame(self, frame: bytes, exc: Exception) -> None:
        """Count and log (rate-limited) a frame :meth:`take` refused."""
        n = self._counters["bad_frames"] = self._counters["bad_frames"] + 1
        if n <= 10 or n % 1000 == 0:
            log.warning("transfer: dropped a malformed frame of %d bytes (%s; %d so far)",
                        len(frame), exc, n)

    def _on_control(self, messages: Any) -> None:
        for kind, *args in messages:
            handler = self._control.get(kind)
            if handler is None:
                log.warning("transfer: unknown control message %r", kind)
            else:
                handler(*args)

    def _drop_undecodable(self, task_id: int, messages: Any) -> list:
        """Drop the messages a registered serializer could not decode (user code raised):
        report each as the sender's error and fail its tuple trees; the rest go on."""
        kept = []
        for message in messages:
            error = contains_undecodable(message)
            if error is None:
                kept.append(message)
                continue
            self._counters["dropped_messages"] += 1
            stream = message[0] if isinstance(message, (list, tuple)) and message else "?"
            src = message[1] if isinstance(message, (list, tuple)) and len(message) > 1 else -1
            text = (f"cannot deserialize a tuple for task {task_id} on stream {stream!r:.60}: "
                    f"{type(error).__name__}: {error}")
            log.error("transfer: task %s: %s", src, text)
            if type(src) is int:
                self._report(src, text)
            self._fail_trees(message)
        return kept

    def _drop_malformed(self, task_id: int, messages: Any) -> list:
        """Keep the well-formed messages of a batch; count, log (rate-limited) and report the rest.

        A message of the wrong shape (an int where the acker protocol wants a list, a string
        as anchor) would otherwise raise inside framework code of the receiving executor.
        The sender is named by the task id it claims: PULL sockets do not tell peers apart.
        """
        kept = []
        for message in messages:
            if well_formed(message):
                kept.append(message)
                continue
            n = self._counters["bad_messages"] = self._counters["bad_messages"] + 1
            if n & (n - 1) == 0:   # the 1st, 2nd, 4th, 8th, ... bad message
                stream, src = message[0], message[1]
                text = (f"dropped a malformed message for task {task_id} on stream {stream!r:.60} "
                        f"claiming to come from task {src!r:.20} ({n} so far)")
                log.warning("transfer: %s", text)
                if type(task_id) is int:
                    self._report(task_id, text)
        return kept


def well_formed(message: Any) -> bool:
    """Whether a received ``(stream, src, values, anchors)`` has the shape executors rely on.

    Anchors are ``None`` or a tuple ``(root, edge, ...)`` of int pairs; acker traffic carries
    only ints (``__ack_init`` in triples, ``__ack_fail`` at least one root). User values are
    the bolt's business: a wrong arity raises in user code, which restarts the task.
    """
    stream, src, values, anchors = message
    if type(stream) is not str or type(src) is not int or not isinstance(values, (tuple, list)):
        return False
    if anchors is not None:
        if type(anchors) is not tuple or len(anchors) % 2:
            return False
        for anchor_id in anchors:
            if type(anchor_id) is not int:
                return False
    if stream in ACKER_STREAMS:
        if not values or not all(type(v) is int for v in values):
            return False
        if stream == ACK_INIT and len(values) % 3:
            return False
        if stream == ACK_FAIL and len(values) != 1:
            return False
    return True
