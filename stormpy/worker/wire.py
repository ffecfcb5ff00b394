"""The batch wire format of the tuple transport: one envelope per destination task, as columns.

A frame is ``msgpack([envelope, ...])``. The send thread has, per destination task, a list of
messages ``(stream, src_task, values, anchors)``; sent as one msgpack array each, they cost the
receiver a tuple, a new ``str`` for the stream and a Python shape check per tuple. A *batch
envelope* carries the same batch as columns::

    [task_id, runs, values, anchors]

- ``runs``: ``[stream, src_task, n, stream, src_task, n, ...]``: the messages' stream and
  source, run-length encoded (a batch usually comes from one task on one stream: one run);
- ``values``: the values of every message, in order;
- ``anchors``: nil when no message is anchored, else ``[counts, roots, edges]``: the root and
  edge ids of all messages as two int arrays, ``counts`` 1 when every message has one root
  (the common case), else the number of roots of each message (0: not anchored).

The columns are built and checked with C-level passes (``zip(*messages)``, ``tuple.count``,
``set(map(type, ...))``) instead of a Python function per tuple: stream and source once per
run, the types of every value array, root and edge id in one pass each, and the
acker streams' values (ints, in triples for ``__ack_init``) per run; only a batch failing
that is checked message by message (``door.well_formed``), so that just its bad
messages are dropped.

A batch that does not fit the columns (a message that is not a 4-sequence, a stream that is
not a string) goes as a *message envelope* ``[task_id, [message, ...]]``, the format control
messages also use; the receiver checks each of its messages. Workers of one topology run the
same code, so no other version of the format is ever read.
"""
from __future__ import annotations

from itertools import chain, islice, repeat
from typing import Any

from stormpy.streams import ACK_FAIL, ACK_INIT, ACKER_STREAMS

_SEQUENCES = frozenset({tuple, list})
_INT = frozenset({int})
_ANCHOR_TYPES = frozenset({tuple, type(None)})
_flatten = chain.from_iterable


class BadBatch(ValueError):
    """A batch envelope whose columns do not agree (a peer's bug or a forged frame)."""


def encode(task_id: int, messages: list[Any]) -> tuple[Any, ...]:
    """The envelope for one destination's batch: columns when they fit, else the messages."""
    try:
        streams, srcs, values, anchors = zip(*messages)   # ValueError unless all have 4 items
    except ValueError:
        return (task_id, messages)
    n = len(streams)
    stream, src = streams[0], srcs[0]
    if type(stream) is not str or type(src) is not int:
        return (task_id, messages)
    try:
        runs = [stream, src, n] if streams.count(stream) == n and srcs.count(src) == n else _runs(streams, srcs)
        return (task_id, runs, values, _anchor_columns(anchors, n))
    except TypeError:   # a stream that is not a str, anchors that are not (root, edge) pairs
        return (task_id, messages)


def _anchor_columns(anchors: tuple[Any, ...], n: int) -> list[Any] | None:
    """``None`` when no message is anchored, else ``[counts, roots, edges]``: ``counts`` is 1
    when every message has one root, else each message's number of roots (0: not anchored).
    Each message's anchors are a flat ``(root, edge, ...)`` tuple (``tree.Anchors``): the
    roots and edges of the batch are the even and odd items of their concatenation."""
    nones = anchors.count(None)
    if nones == n:
        return None
    if not set(map(type, anchors)) <= _ANCHOR_TYPES:
        raise TypeError("anchors that are not (root, edge, ...) tuples")
    lengths = list(map(len, filter(None, anchors))) if nones else list(map(len, anchors))
    if any(k % 2 for k in set(lengths)):
        raise TypeError("anchors that are not (root, edge) pairs")
    ids = list(_flatten(anchors)) if not nones else list(_flatten(filter(None, anchors)))
    roots, edges = ids[0::2], ids[1::2]
    if not nones and len(roots) == n and set(lengths) == {2}:
        return [1, roots, edges]    # one root each, the common case
    counts = [0 if a is None else len(a) >> 1 for a in anchors]
    return [counts, roots, edges]


def _runs(streams: tuple[Any, ...], srcs: tuple[Any, ...]) -> list[Any]:
    runs: list[Any] = []
    last: Any = None
    n = 0
    for key in zip(streams, srcs):
        if key == last:
            n += 1
            continue
        if last is not None:
            runs += (last[0], last[1], n)
        stream, src = key
        if type(stream) is not str or type(src) is not int:
            raise TypeError("stream or source of the wrong type")
        last, n = key, 1
    runs += (last[0], last[1], n)
    return runs


def decode(envelope: Any) -> tuple[list[Any], bool]:
    """The messages of a batch envelope, and whether the caller must check them one by one
    (a value, anchor id or acker run failed its column check: only the bad messages are then
    dropped). Raises :class:`BadBatch` when the columns do not agree in length or a run is
    not ``(stream, source, count)``."""
    _task_id, runs, values, anchor_columns = envelope
    if not isinstance(values, (tuple, list)):
        raise BadBatch("values is not an array")
    n = len(values)
    streams, srcs, acker_runs = _expand_runs(runs, n)
    anchors, ids_ok = _anchors(anchor_columns, n)
    messages = list(zip(streams, srcs, values, anchors))
    if not ids_ok or not set(map(type, values)) <= _SEQUENCES:
        return messages, True
    return messages, any(not _acker_values_ok(stream, values[start:end]) for stream, start, end in acker_runs)


def _anchors(columns: Any, n: int) -> tuple[Any, bool]:
    """Each message's ``(root, edge, ...)`` (or None) from the anchor columns, and whether
    every id is an int."""
    if columns is None:
        return repeat(None, n), True
    if not isinstance(columns, (tuple, list)) or len(columns) != 3:
        raise BadBatch("anchors are neither nil nor [counts, roots, edges]")
    counts, roots, edges = columns
    if not isinstance(roots, (tuple, list)) or not isinstance(edges, (tuple, list)) or len(roots) != len(edges):
        raise BadBatch("anchor roots and edges are not arrays of one length")
    # ids that are not ints (a peer's bug) ask for the message check, which drops their messages
    ids_ok = set(map(type, roots)) <= _INT and set(map(type, edges)) <= _INT
    if counts == 1 and type(counts) is int:
        if len(roots) != n:
            raise BadBatch(f"{len(roots)} anchor(s) for {n} message(s)")
        return zip(roots, edges), ids_ok
    if (not isinstance(counts, (tuple, list)) or len(counts) != n or not set(map(type, counts)) <= _INT
            or min(counts, default=0) < 0 or sum(counts) != len(roots)):
        raise BadBatch("anchor counts do not match the messages and ids")
    pairs = zip(roots, edges)
    return [tuple(_flatten(islice(pairs, k))) if k else None for k in counts], ids_ok


def _acker_values_ok(stream: str, values: Any) -> bool:
    """Whether a run of acker messages has the values the acker and spouts read: ints only,
    ``__ack_init`` in triples, ``__ack_fail`` one root (``door.well_formed``, per run)."""
    if not all(values) or not set(map(type, _flatten(values))) <= _INT:
        return False
    lengths = set(map(len, values))
    if stream == ACK_INIT:
        return not any(k % 3 for k in lengths)
    if stream == ACK_FAIL:
        return lengths == {1}
    return True


def _expand_runs(runs: Any, n: int) -> tuple[Any, Any, list[tuple[str, int, int]]]:
    """Stream and source columns (iterators) from the runs, checking each run once; and the
    acker streams' runs as ``(stream, start, end)``."""
    if not isinstance(runs, (tuple, list)) or len(runs) % 3 or not runs:
        raise BadBatch("runs are not (stream, source, count) triples")
    total = 0
    acker: list[tuple[str, int, int]] = []
    for i in range(0, len(runs), 3):
        stream, src, k = runs[i], runs[i + 1], runs[i + 2]
        if type(stream) is not str or type(src) is not int or type(k) is not int or k < 1:
            raise BadBatch("a run is not (stream, source task, count)")
        if stream in ACKER_STREAMS:
            acker.append((stream, total, total + k))
        total += k
    if total != n:
        raise BadBatch(f"runs count {total} message(s), values {n}")
    if len(runs) == 3:
        return repeat(runs[0], n), repeat(runs[1], n), acker
    return (_flatten(repeat(runs[i], runs[i + 2]) for i in range(0, len(runs), 3)),
            _flatten(repeat(runs[i + 1], runs[i + 2]) for i in range(0, len(runs), 3)), acker)
