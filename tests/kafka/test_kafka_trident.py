"""OpaqueKafkaSpout and TransactionalKafkaSpout on the local runner, from the mock Kafka cluster:
exact Trident word counts in SqliteMapState, with records arriving while the topology runs and
an undecodable record skipped."""
from __future__ import annotations

import os
import random
import threading
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stormpy.local.runner import LocalTopology
from stormpy.testing import wait_until
from stormpy.testing.kafka import produce
from stormpy.trident import SqliteMapState

sys.path.insert(0, str(Path(__file__).resolve().parent / "topologies"))
from kafka_trident import TridentKafkaCounts  # noqa: E402

WORDS = "kafka storm trident opaque batch offset partition replay".split()


def lines(seed: int, n: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 6))) for _ in range(n)]


def counts(factory: Any) -> Counter:
    try:
        return Counter({key[0]: value for key, value in factory.open_map().items()})
    except Exception:  # noqa: BLE001 - the table may not exist yet
        return Counter()


@pytest.mark.parametrize("kind", ["opaque", "transactional"])
def test_trident_kafka_spout_counts_exactly(kafka_cluster: Any, kafka_names: Any, tmp_path: Path, kind: str) -> None:
    topic, _ = kafka_names
    first, second = lines(1, 300), lines(2, 200)
    produce(kafka_cluster.bootstrap_servers, topic, [line.encode() for line in first] + [b"\xff\xfe"])
    db = tmp_path / "counts.db"
    conf = {"kwc.bootstrap": kafka_cluster.bootstrap_servers, "kwc.topic": topic, "kwc.db": str(db), "kwc.kind": kind}
    local = LocalTopology(TridentKafkaCounts, f"kafka-trident-{kind}", user_overrides=conf).start()
    factory = (SqliteMapState.opaque if kind == "opaque" else SqliteMapState.transactional)(db)
    expected = Counter(w for line in first for w in line.split())
    try:
        wait_until(lambda: counts(factory) == expected, 90, "the first 300 lines counted")
        produce(kafka_cluster.bootstrap_servers, topic, [line.encode() for line in second])
        expected.update(w for line in second for w in line.split())
        wait_until(lambda: counts(factory) == expected, 90, "the 200 lines produced while running counted")
        time.sleep(1.0)   # a batch counted twice would show up now
        assert counts(factory) == expected
    finally:
        local.stop(drain_secs=5)


def test_bad_arguments_are_one_clear_error() -> None:
    from stormpy.kafka import OpaqueKafkaSpout
    with pytest.raises(ValueError, match="max_batch_size must be positive"):
        OpaqueKafkaSpout("localhost:9092", ["t"], max_batch_size=0)
    with pytest.raises(ValueError, match="topics must be"):
        OpaqueKafkaSpout("localhost:9092", [])


def test_a_new_batch_waits_a_millisecond_for_its_first_record_and_a_replay_for_all_of_its_own(
        kafka_cluster: Any, kafka_names: Any) -> None:
    """The emitter runs on the executor loop: a new batch that waited 50 ms per partition for
    records held up the process's other executors and moved the spout to a thread of its own
    (the Kafka Trident word count at a quarter of its speed). A replay must wait: it re-emits
    exactly its records."""
    from stormpy.kafka import OpaqueKafkaSpout

    waits: list[float] = []

    class Recorded:
        def __init__(self, reader: Any) -> None:
            self.reader = reader

        def consume(self, num: int, timeout: float) -> Any:
            waits.append(timeout)
            return self.reader.consume(num, timeout=timeout)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.reader, name)

    class RecordedSpout(OpaqueKafkaSpout):
        def _reader(self, partition: str, start: int) -> Any:
            return Recorded(super()._reader(partition, start))

    topic, _ = kafka_names
    produce(kafka_cluster.bootstrap_servers, topic, [f"r-{i}".encode() for i in range(40)], partition=0)
    spout = RecordedSpout(kafka_cluster.bootstrap_servers, [topic])
    spout.initialize({}, None)
    try:
        partition, got = f"{topic}:0", []
        wait_until(lambda: got.extend(spout._read(partition, len(got), None)) or len(got) >= 40, 30,
                   "the 40 records read by new batches")
        assert [r.value() for r in got] == [f"r-{i}".encode() for i in range(40)]
        assert waits and max(waits) <= 0.001, sorted(set(waits))
        waits.clear()
        replay = spout._read(partition, 10, 30)
        assert [r.offset() for r in replay] == list(range(10, 30))
    finally:
        spout.close()


@pytest.mark.parametrize("encoding", ["utf-8", None])
def test_a_batch_of_the_default_translator_emits_what_its_apply_gives(encoding: str | None) -> None:
    """The Trident spouts translate a batch of the default ``RecordTranslator`` inline (its
    topic and partition once): the values must be ``apply``'s, and an undecodable record is
    skipped and the batch goes on."""
    from stormpy.kafka.config import RecordTranslator
    from stormpy.trident import OpaqueKafkaSpout

    class Message:   # confluent-kafka makes Message objects in Python only from 2.13; the extra allows 2.3
        def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
            self._fields = (topic, partition, offset, key, value)

        def topic(self) -> str:
            return self._fields[0]

        def partition(self) -> int:
            return self._fields[1]

        def offset(self) -> int:
            return self._fields[2]

        def key(self) -> bytes | None:
            return self._fields[3]

        def value(self) -> bytes | None:
            return self._fields[4]

    records = [Message(topic="t", partition=3, offset=7 + i, key=key, value=value)
               for i, (key, value) in enumerate([(None, b"one"), (b"k", b"two"), (b"k2", None),
                                                 (None, b"\xff\xfe"), (b"\xff", b"x"), (None, b"last")])]

    class Collector:
        def __init__(self) -> None:
            self.emitted: list[list[Any]] = []

        def emit(self, values: list[Any]) -> None:
            self.emitted.append(values)

    spout = OpaqueKafkaSpout("localhost:9092", ["t"], record_translator=RecordTranslator(encoding))
    fast = Collector()
    spout._emit(fast, records)

    class Same(RecordTranslator):   # not exactly RecordTranslator: the record-by-record path
        pass

    spout.translator = Same(encoding)
    general = Collector()
    spout._emit(general, records)
    assert fast.emitted == general.emitted
    assert len(fast.emitted) == (4 if encoding else 6)
    assert fast.emitted[0] == ["t", 3, 7, None, "one" if encoding else b"one"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="skipped: needs Linux CPU affinity and two CPUs")
def test_librdkafka_threads_may_run_on_every_core_when_made_on_a_pinned_thread(kafka_cluster: Any,
                                                                                kafka_names: Any) -> None:
    """An executor thread of ``stormpy local`` (or a pinned worker) runs on one core; the
    consumers and producers made there must not put librdkafka's threads on that core too."""
    from stormpy.kafka import KafkaBolt
    from stormpy.trident import OpaqueKafkaSpout

    topic, _ = kafka_names
    produce(kafka_cluster.bootstrap_servers, topic, [b"one record"])
    every = os.sched_getaffinity(os.getpid())
    made: list[Any] = []

    def rdk_threads() -> dict[int, set[int]]:
        found = {}
        for tid in os.listdir(f"/proc/{os.getpid()}/task"):
            try:   # a thread (an earlier test's client closing) may end between the listing and here
                if Path(f"/proc/{os.getpid()}/task/{tid}/comm").read_text().startswith("rdk:"):
                    found[int(tid)] = os.sched_getaffinity(int(tid))
            except OSError:
                continue
        return found

    before = rdk_threads()

    failed: list[BaseException] = []

    def pinned() -> None:
        try:
            os.sched_setaffinity(0, {min(every)})
            spout = OpaqueKafkaSpout(kafka_cluster.bootstrap_servers, [topic])
            made.append(spout)
            spout.initialize({}, None)
            spout._read(f"{topic}:0", 0, None)
            bolt = KafkaBolt(kafka_cluster.bootstrap_servers, topic)
            made.append(bolt)
            bolt.initialize({}, None)
        except BaseException as exc:  # noqa: BLE001 - raised again on the test's thread
            failed.append(exc)

    thread = threading.Thread(target=pinned)
    thread.start()
    thread.join()
    try:
        if failed:
            raise failed[0]
        new = {tid: mask for tid, mask in rdk_threads().items() if tid not in before}
        assert len(new) >= 2 and all(mask == every for mask in new.values()), new
    finally:
        for client in made:
            client.close()


def test_only_the_default_translator_as_written_is_made_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spouts make the values of ``is_plain_default`` translators themselves; a translator with
    any part of its own (a subclass, ``apply`` or ``_decode`` replaced on it or on the class) is
    not one of them (test_kafka_spout.py checks that the spout then calls it)."""
    from stormpy.kafka.config import FuncTranslator, RecordTranslator, is_plain_default

    assert is_plain_default(RecordTranslator()) and is_plain_default(RecordTranslator(encoding=None))

    class Sub(RecordTranslator):
        pass

    own_apply, own_decode = RecordTranslator(), RecordTranslator()
    own_apply.apply = lambda record: None              # type: ignore[method-assign]
    own_decode._decode = lambda raw: raw               # type: ignore[method-assign]
    for translator in (Sub(), own_apply, own_decode, FuncTranslator(lambda r: None, ["x"])):
        assert not is_plain_default(translator), translator
    monkeypatch.setattr(RecordTranslator, "_decode", lambda self, raw: raw)
    assert not is_plain_default(RecordTranslator())
