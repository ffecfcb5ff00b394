"""``complete_topology``: run a topology on fixed input until every tuple tree completes.

Storm's ``Testing.completeTopology`` for stormpy topologies, for unit tests of user code::

    result = complete_topology(WordCount, {"sentences": [["a b"], ["b"]]})
    assert sorted(result.emitted("split")) == [["a"], ["b"], ["b"]]
    assert result.acked["sentences"] == 2

How it works (the same way Storm does it): the topology class is rebuilt with every spout
replaced by a *feeder* spout that declares the real spout's streams and emits exactly the
given tuples, each with a ``tup_id`` so the acker tracks its tree; a *capture* bolt
subscribes to every (non-direct) stream of every component with a global grouping and
records what it receives. The rebuilt topology runs in this process (``LocalTopology``: real
executor threads, real acker) until each fed tuple was acked or failed, then stops after
draining. Bolts are the user's own classes, unchanged, with their parallelism and config.

Limits, on purpose: feeders run one task each and never replay a failed tuple (a test wants
to see the failure, not hide it); tuples on direct streams are not captured (their sender
picks the receiving task); order across parallel tasks is whatever the threads produced, so
compare sorted lists or ``collections.Counter``.
"""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stormpy import config as cfg
from stormpy.api.component import Bolt, Spout
from stormpy.testing.processes import WaitTimeout, wait_until
from stormpy.api.dsl import DEFAULT_STREAM, ComponentSpec, Grouping, Topology, normalize_outputs

log = logging.getLogger(__name__)

CAPTURE_COMPONENT = "complete-topology-capture"


class TopologyIncomplete(AssertionError):
    """Some fed tuple trees were neither acked nor failed in time; the message says which."""


@dataclass(frozen=True)
class FixedTuple:
    """A fed tuple on a stream other than ``default``: ``FixedTuple(["a"], stream="words")``."""

    values: Sequence[Any]
    stream: str = DEFAULT_STREAM


@dataclass
class _Recorder:
    """Shared by the feeder and capture instances of one run (they run on executor threads)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    emitted: dict[tuple[str, str], list[list[Any]]] = field(default_factory=dict)
    acked: dict[str, set[int]] = field(default_factory=dict)
    failed: dict[str, set[int]] = field(default_factory=dict)

    def capture(self, component: str, stream: str, values: Sequence[Any]) -> None:
        with self.lock:
            self.emitted.setdefault((component, stream), []).append(list(values))

    def settle(self, spout: str, tup_id: int, ok: bool) -> None:
        with self.lock:
            (self.acked if ok else self.failed).setdefault(spout, set()).add(tup_id)

    def settled(self, spout: str) -> int:
        with self.lock:
            return len(self.acked.get(spout, ())) + len(self.failed.get(spout, ()))


class CompletedTopology:
    """What a ``complete_topology`` run saw: emitted tuples per (component, stream), acks, errors."""

    def __init__(self, recorder: _Recorder, spouts: Sequence[str], errors: Mapping[str, list[str]]) -> None:
        self._emitted = {key: list(values) for key, values in recorder.emitted.items()}
        self.acked: dict[str, int] = {s: len(recorder.acked.get(s, ())) for s in spouts}
        self.failed: dict[str, int] = {s: len(recorder.failed.get(s, ())) for s in spouts}
        self.errors: dict[str, list[str]] = {c: list(texts) for c, texts in errors.items()}

    def emitted(self, component: str, stream: str = DEFAULT_STREAM) -> list[list[Any]]:
        """Value lists ``component`` emitted on ``stream`` (spouts included), in arrival order."""
        return list(self._emitted.get((component, stream), []))

    def streams(self) -> list[tuple[str, str]]:
        """Every (component, stream) that emitted at least one tuple."""
        return sorted(self._emitted)

    def __repr__(self) -> str:
        counts = {f"{c}/{s}": len(v) for (c, s), v in sorted(self._emitted.items())}
        return f"CompletedTopology(emitted={counts}, acked={self.acked}, failed={self.failed})"


def _feeder_class(spout_name: str, outputs: Any, tuples: list[FixedTuple], recorder: _Recorder,
                  token: str) -> type:
    class Feeder(Spout):
        """Emits the fixed tuples once each, ``tup_id`` = their index; never replays."""

        def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
            self.next_index = 0

        def next_tuple(self) -> None:
            if self.next_index < len(tuples):
                fixed = tuples[self.next_index]
                self.emit(list(fixed.values), tup_id=self.next_index, stream=fixed.stream)
                self.next_index += 1

        def ack(self, tup_id: Any) -> None:
            recorder.settle(spout_name, tup_id, True)

        def fail(self, tup_id: Any) -> None:
            recorder.settle(spout_name, tup_id, False)

    Feeder.outputs = outputs
    Feeder.__qualname__ = Feeder.__name__ = f"Feeder_{_ident(spout_name)}_{token}"
    return Feeder


def _capture_class(recorder: _Recorder, token: str) -> type:
    class Capture(Bolt):
        """Records every tuple it receives; acked automatically, so trees through it complete."""

        outputs: Any = None

        def process(self, tup: Any) -> None:
            recorder.capture(tup.component, tup.stream, tup.values)

    Capture.__qualname__ = Capture.__name__ = f"Capture_{token}"
    return Capture


def _ident(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def _fixed(spout: str, streams: Mapping[str, Any], items: Sequence[Any]) -> list[FixedTuple]:
    """The fed items of one spout as FixedTuples, checked against its declared streams."""
    fixed = []
    for i, item in enumerate(items):
        tup = item if isinstance(item, FixedTuple) else FixedTuple(item)
        if isinstance(tup.values, (str, bytes)) or not isinstance(tup.values, Sequence):
            raise TypeError(f"complete_topology: input {i} of spout {spout!r} must be a list of values, "
                            f"got {tup.values!r}")
        declared = streams.get(tup.stream)
        if declared is None:
            raise ValueError(f"complete_topology: spout {spout!r} declares no stream {tup.stream!r} "
                             f"(it has {sorted(streams)})")
        if len(tup.values) != len(declared.fields):
            raise ValueError(f"complete_topology: input {i} of spout {spout!r} has {len(tup.values)} values "
                             f"for the fields {list(declared.fields)} of stream {tup.stream!r}")
        fixed.append(tup)
    return fixed


def _rebuild(topology: type[Topology], inputs: Mapping[str, Sequence[Any]], recorder: _Recorder,
             token: str) -> tuple[type[Topology], list[str]]:
    """The topology with feeders for spouts and a capture bolt on every stream; its spout names."""
    specs: list[ComponentSpec] = list(topology.specs)
    spouts = [s.name for s in specs if callable(getattr(s.component_cls, "next_tuple", None))]
    unknown = sorted(set(inputs) - set(spouts))
    if unknown:
        raise ValueError(f"complete_topology: inputs name unknown spout(s) {unknown}; the spouts are {spouts}")
    new: dict[int, ComponentSpec] = {}
    for spec in specs:
        if spec.name in spouts:
            outputs = getattr(spec.component_cls, "outputs", None)
            tuples = _fixed(spec.name, normalize_outputs(outputs), list(inputs.get(spec.name, ())))
            feeder = _feeder_class(spec.name, outputs, tuples, recorder, token)
            new[id(spec)] = ComponentSpec(feeder, name=spec.name, par=1, config=spec.config)
        else:
            # The instance too: ``SomeBolt(...).spec()`` runs that object (its windows, lambdas).
            new[id(spec)] = ComponentSpec(spec.component_cls, name=spec.name, par=spec.par, config=spec.config,
                                          instance=spec.instance, outputs=spec.outputs)
    for spec in specs:
        groupings = spec.input_groupings()
        if groupings:
            new[id(spec)].inputs = {new[id(src)][stream]: grouping for src, stream, grouping in groupings}
    capture_inputs = {}
    for spec in specs:
        for stream in normalize_outputs(getattr(new[id(spec)].component_cls, "outputs", None)).values():
            if not stream.direct:
                capture_inputs[new[id(spec)][stream.name]] = Grouping.GLOBAL
    namespace: dict[str, Any] = {"config": dict(getattr(topology, "config", None) or {})}
    namespace.update({f"_c{i}": spec for i, spec in enumerate(new.values())})
    namespace["_capture"] = ComponentSpec(_capture_class(recorder, token), name=CAPTURE_COMPONENT,
                                          inputs=capture_inputs, par=1)
    return type(topology)(f"{topology.__name__}Completed", (Topology,), namespace), spouts


def complete_topology(topology: type[Topology], inputs: Mapping[str, Sequence[Any]], *,
                      conf: Mapping[str, Any] | None = None, timeout_secs: float = 30.0,
                      drain_secs: float = 10.0) -> CompletedTopology:
    """Run ``topology`` in this process on fixed spout input until every tuple tree completes.

    ``inputs`` maps a spout's component name to the tuples it should emit: each a list of
    values on the default stream, or a ``FixedTuple(values, stream=...)``; spouts not named
    emit nothing. ``conf`` overrides the topology's config (an acker is always used: without
    one there are no trees to complete). Raises ``TopologyIncomplete`` when some trees are
    neither acked nor failed within ``timeout_secs``; a tree that fails (a bolt's ``fail``,
    or ``topology.message.timeout.secs``) counts as complete and shows in ``failed``.
    """
    from stormpy.local.runner import LocalTopology

    recorder = _Recorder()
    token = uuid.uuid4().hex[:8]
    rebuilt, spouts = _rebuild(topology, inputs, recorder, token)
    expected = {s: len(inputs.get(s, ())) for s in spouts}
    overrides = dict(conf or {})
    ackers_key = cfg.TOPOLOGY_ACKER_EXECUTORS.name
    ackers = overrides.get(ackers_key, topology.config.get(ackers_key))
    if ackers is not None and int(ackers) < 1:   # None means one per worker: one here
        overrides[ackers_key] = 1
    local = LocalTopology(rebuilt, _ident(topology.__name__) or "topology", user_overrides=overrides)
    local.start()
    try:
        wait_until(lambda: all(recorder.settled(s) >= n for s, n in expected.items()), timeout_secs,
                   "every fed tuple tree to complete", interval=0.02)
    except WaitTimeout:
        local.stop(drain_secs=0)
        missing = {s: n - recorder.settled(s) for s, n in expected.items() if recorder.settled(s) < n}
        raise TopologyIncomplete(
            f"complete_topology({topology.__name__}): tuple trees still open after {timeout_secs:g}s: "
            + ", ".join(f"spout {s!r}: {m} of {expected[s]}" for s, m in sorted(missing.items()))
            + _error_hint(local)) from None
    local.stop(drain_secs=drain_secs)   # unanchored emits may still be on their way to the capture
    errors = {c: [text for _t, _task, text in kept] for c, kept in local.reporter.errors.items()}
    return CompletedTopology(recorder, spouts, errors)


def _error_hint(local: Any) -> str:
    errors = local.reporter.errors
    if not errors:
        return " (no component reported an error; does a bolt neither ack nor fail?)"
    last = {c: kept[-1][2].strip().splitlines()[-1] for c, kept in errors.items() if kept and kept[-1][2].strip()}
    return f"; errors reported: {last}"
