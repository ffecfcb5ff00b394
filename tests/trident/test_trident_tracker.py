"""The per-task batch protocol (BatchCore) driven through a recording Port."""
from __future__ import annotations

from stormpy.trident.batch import BatchCore


class Handle:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


class RecordingPort:
    def __init__(self, targets=(10, 11)):
        self.targets = list(targets)
        self.data, self.coords, self.acked, self.failed, self.errors = [], [], [], [], []
        self._next = 0

    def emit(self, stream, values):
        task = self.targets[self._next % len(self.targets)]
        self._next += 1
        self.data.append((stream, task, values))
        return [task]

    def emit_coord(self, stream, task, values, anchors):
        self.coords.append((stream, task, values, list(anchors)))

    def ack(self, handle):
        self.acked.append(handle)

    def fail(self, handle):
        self.failed.append(handle)

    def report_error(self, text):
        self.errors.append(text)


class Runtime:
    """Echo runtime: every fed value goes out on stream 'out'; finish records the batch."""

    def __init__(self, core=None, explode_on=None):
        self.core = core
        self.finished, self.discarded = [], []
        self.explode_on = explode_on

    def feed(self, stream, batch, values):
        if values == self.explode_on:
            raise ValueError("boom")
        self.core.send("out", batch, values)

    def emit_spout(self, batch, values):
        self.feed("spout", batch, values)

    def finish(self, batch, phase=None):
        self.finished.append((batch.txid, batch.attempt) if phase is None else (batch.txid, batch.attempt, phase))

    def discard(self, txid):
        self.discarded.append(txid)


def make(expected=2, defer=False, source=None, explode_on=None):
    port = RecordingPort()
    runtime = Runtime(explode_on=explode_on)
    out = [("out", "$coord-out", [10, 11], False)]
    if defer:
        out.append(("new", "$coord-new", [12], True))    # a persist's new values: counted at commit
    core = BatchCore(runtime, port, expected, out, defer, source)
    runtime.core = core
    return core, port, runtime


def test_completes_when_all_reports_and_counts_match():
    core, port, runtime = make(expected=2)
    c1, c2 = Handle("c1"), Handle("c2")
    core.on_coord([1, 0], 2, c1)           # upstream task A sent 2
    core.on_data("in", [1, 0], ["a"], Handle("d1"))
    core.on_coord([1, 0], 1, c2)           # upstream task B sent 1
    assert runtime.finished == []          # 2 of 3 data tuples
    core.on_data("in", [1, 0], ["b"], Handle("d2"))
    assert runtime.finished == []
    core.on_data("in", [1, 0], ["c"], Handle("d3"))
    assert runtime.finished == [(1, 0)]
    # one coordination tuple per downstream task, counts of what each was sent, anchored to c1, c2
    assert sorted((t, v[1]) for _s, t, v, _a in port.coords) == [(10, 2), (11, 1)]
    assert all(a == [c1, c2] for *_x, a in port.coords)
    assert c1 in port.acked and c2 in port.acked
    assert port.failed == []


def test_zero_count_reports_complete_an_empty_batch():
    core, port, runtime = make(expected=2)
    core.on_coord([3, 0], 0, Handle("a"))
    core.on_coord([3, 0], 0, Handle("b"))
    assert runtime.finished == [(3, 0)]
    assert [v for *_x, v, _a in port.coords] == [[[3, 0], 0], [[3, 0], 0]]


def test_error_fails_the_batch_and_drops_its_later_tuples():
    core, port, runtime = make(expected=1, explode_on=["bad"])
    c1 = Handle("c1")
    core.on_coord([1, 0], 2, c1)
    core.on_data("in", [1, 0], ["bad"], Handle("d1"))
    assert port.failed == [c1]
    assert "boom" in port.errors[0] and "txid 1" in port.errors[0]
    late = Handle("late")
    core.on_coord([1, 0], 0, late)             # a straggler of the failed attempt
    assert late in port.failed
    core.on_data("in", [1, 0], ["x"], Handle("d2"))
    assert runtime.finished == []
    # the replay (a new attempt) runs normally
    core.on_coord([1, 1], 1, Handle("c1b"))
    core.on_data("in", [1, 1], ["x"], Handle("d3"))
    assert runtime.finished == [(1, 1)]


def test_newer_attempt_replaces_older_and_stale_tuples_are_dropped():
    core, port, runtime = make(expected=1)
    old = Handle("old")
    core.on_coord([5, 0], 3, old)              # attempt 0 waits for 3 tuples that never come
    core.on_coord([5, 1], 0, Handle("new"))
    assert old in port.failed
    assert runtime.finished == [(5, 1)]
    stale = Handle("stale")
    core.on_coord([5, 0], 0, stale)
    assert stale in port.failed


def test_committer_acks_at_completion_and_finishes_at_commit():
    core, port, runtime = make(expected=1, defer=True)
    c = Handle("c")
    core.on_coord([2, 0], 0, c)
    # batch-time part finished, its streams counted (anchored to c), c acked; state untouched
    assert c in port.acked and runtime.finished == [(2, 0, "batch")]
    assert [(s, a) for s, _t, _v, a in port.coords] == [("$coord-out", [c]), ("$coord-out", [c])]
    wrong = Handle("commit-other-attempt")
    core.on_commit([2, 1], wrong)
    assert wrong in port.failed
    commit = Handle("commit")
    core.on_commit([2, 0], commit)
    assert runtime.finished == [(2, 0, "batch"), (2, 0, "commit")]
    assert commit in port.acked
    # the state's downstream rides on the commit tree
    assert [(s, t, a) for s, t, _v, a in port.coords[2:]] == [("$coord-new", 12, [commit])]


def test_commit_without_a_completed_batch_fails():
    core, port, _runtime = make(expected=1, defer=True)
    commit = Handle("commit")
    core.on_commit([9, 0], commit)
    assert port.failed == [commit]


class Source:
    def __init__(self, values):
        self.values = values
        self.commits, self.successes = [], []

    def emit(self, txid, attempt, collector):
        for v in self.values:
            collector.emit([v])

    def commit(self, txid, attempt):
        self.commits.append((txid, attempt))
        return True

    def success(self, txid):
        self.successes.append(txid)


def test_spout_group_emits_then_completes_and_counts_per_task():
    source = Source(["a", "b", "c"])
    core, port, runtime = make(expected=0, source=source)
    h = Handle("batch")
    core.on_batch([1, 0], h)
    assert [v for _s, _t, v in port.data] == [[[1, 0], "a"], [[1, 0], "b"], [[1, 0], "c"]]
    assert sorted((t, v[1]) for _s, t, v, _a in port.coords) == [(10, 2), (11, 1)]
    assert port.acked[-1] is h
    core.on_commit([1, 0], Handle("commit"))
    core.on_success([1, 0], Handle("success"))
    assert source.commits == [(1, 0)] and source.successes == [1]
