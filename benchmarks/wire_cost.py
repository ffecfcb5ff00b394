"""Benchmark: the transport's CPU cost per tuple, send side and receive side, in one process.

    python benchmarks/wire_cost.py [--rounds 20] [--frames 200]

Drives the code a cluster worker's transfer threads run, without sockets: the send thread's
``_pack`` (frame encoding) and the receive thread's ``_deliver`` (decoding, the checks at the
door, handing batches to the runtime) of ``stormpy.worker.transfer.ZmqTransfer``, on the word
count's traffic: batches of 100 anchored one-word tuples from one split task to one count
task, and the ``__ack_init``/``__ack_ack`` messages that go with them. Timed with the thread's
CPU clock; printed: min and median ns per tuple over ``--rounds``, and bytes per tuple. Only
``ZmqTransfer`` is used, so the same file runs against an older checkout
(``PYTHONPATH=<checkout>``).
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from typing import Any

import msgpack

from stormpy.worker.transfer import ZmqTransfer

WORDS = "storm stream tuple bolt spout nimbus worker acker zookeeper supervisor executor".split()
BATCH = 100


class Sink:
    """The runtime's ``receive``: counts what is delivered."""

    local_tasks: set[int] = set()

    def __init__(self) -> None:
        self.messages = 0

    def receive(self, task_id: int, messages: Any) -> None:
        self.messages += len(messages)


def traffic(rng: random.Random) -> list[tuple[list[tuple[int, list[Any]]], int]]:
    """Envelope lists as the send thread groups them, with the number of word tuples each holds."""
    words = [(("default", 5, [rng.choice(WORDS)], (rng.getrandbits(64), rng.getrandbits(64))))
             for _ in range(BATCH)]
    inits = [("__ack_init", 3, [r, rng.getrandbits(64), 3], None)
             for r in (rng.getrandbits(64) for _ in range(BATCH // 8))]
    acks = [("__ack_ack", 5, [v for _ in range(BATCH // 8) for v in (rng.getrandbits(64), rng.getrandbits(64))],
             None)]
    return [([(9, words)], BATCH), ([(2, inits)], 0), ([(2, acks)], 0)]


def run(rounds: int, frames: int) -> None:
    transfer = ZmqTransfer("127.0.0.1", 0)
    sink = Sink()
    transfer._runtime = sink  # type: ignore[assignment]
    control: dict[str, Any] = {}
    packer = msgpack.Packer(use_bin_type=True)
    rng = random.Random(1)
    work = [traffic(rng) for _ in range(frames)]
    send_ns: list[float] = []
    recv_ns: list[float] = []
    size = 0
    words = sum(n for frame in work for _, n in frame)
    for _ in range(rounds):
        t0 = time.thread_time_ns()
        packed = [transfer._pack(envelopes, packer) for frame in work for envelopes, _ in frame]
        t1 = time.thread_time_ns()
        for frame in packed:
            transfer._deliver(frame, control)
        t2 = time.thread_time_ns()
        send_ns.append((t1 - t0) / words)
        recv_ns.append((t2 - t1) / words)
        size = sum(map(len, packed))
    transfer._ctx.destroy(linger=0)
    print(f"send (pack) per word tuple, with its acker traffic: min {min(send_ns):,.0f} ns, "
          f"median {statistics.median(send_ns):,.0f} ns")
    print(f"receive (decode, check, hand over) per word tuple:   min {min(recv_ns):,.0f} ns, "
          f"median {statistics.median(recv_ns):,.0f} ns")
    print(f"wire bytes per word tuple: {size / words:.1f}; delivered {sink.messages:,} messages")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--frames", type=int, default=200)
    args = parser.parse_args(argv)
    run(args.rounds, args.frames)
    return 0


if __name__ == "__main__":
    sys.exit(main())
