"""A second process for the transport tests: echoes every batch for task 2 back to task 1.

Run as ``python transfer_peer.py <own-port> <peer-port> <overload-flag-file>``. While the flag
file exists its runtime reports itself overloaded, which drives the backpressure test.
"""
from __future__ import annotations

import os
import sys

from stormpy.signals import StopOnSignals
from stormpy.worker.transfer import ZmqTransfer


class EchoRuntime:
    def __init__(self, transfer: ZmqTransfer, flag: str) -> None:
        self.local_tasks = {2}
        self.transfer = transfer
        self.flag = flag

    def receive(self, task_id: int, messages: list) -> None:
        self.transfer.send(1, [(s, 2, v, a) for (s, _src, v, a) in messages])

    def is_overloaded(self) -> bool:
        return os.path.exists(self.flag)

    def is_locally_overloaded(self) -> bool:
        return os.path.exists(self.flag)

    def set_remote_backpressure(self, on: bool) -> None:
        print(f"BP {on}", flush=True)


def main() -> None:
    port, peer_port, flag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    transfer = ZmqTransfer("127.0.0.1", port, bind_host="127.0.0.1")
    runtime = EchoRuntime(transfer, flag)
    transfer.update_routes({1: ("127.0.0.1", peer_port), 2: ("127.0.0.1", port)})
    transfer.start(runtime)
    with StopOnSignals(who="transfer peer") as signals:
        print("READY", flush=True)
        signals.wait(poll_secs=0.1)
    transfer.stop(signals.reason("peer test process done"))


if __name__ == "__main__":
    main()
