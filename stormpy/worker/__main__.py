"""``python -m stormpy.worker <topology-id> <supervisor-id> <port> <worker-id> --conf FILE``.

The worker logs to ``<storm.log.dir>/workers-artifacts/<topology-id>/<port>/worker.log``,
rotating at ``worker.log.max.bytes``; the supervisor appends its raw stdout/stderr to
``worker.log.out`` next to it (and the worker then routes print() into the log); started by
hand (stderr elsewhere) it also logs to stderr. SIGTERM stops it cleanly: spouts
paused, executors drained for at most half of ``supervisor.worker.shutdown.sleep.secs``, then
exit 0. A worker that cannot start (no assignment for its port, code missing) exits 2; one whose
framework threads keep failing (:class:`~stormpy.daemon_guard.ThreadGuard`) exits 3, and the
supervisor restarts it.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from stormpy import config as C
from stormpy.daemon_guard import FATAL_EXIT_CODE
from stormpy.logs import FORMAT, LogWriter, add_file_log, worker_log_path, worker_out_path
from stormpy.signals import StopOnSignals

log = logging.getLogger("stormpy.worker")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m stormpy.worker", description="A stormpy worker process.")
    parser.add_argument("topology_id")
    parser.add_argument("supervisor_id")
    parser.add_argument("port", type=int)
    parser.add_argument("worker_id")
    parser.add_argument("--conf", help="JSON file with the supervisor's config", default=None)
    parser.add_argument("-c", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    return parser.parse_args(argv)


def _load_conf(args: argparse.Namespace) -> C.Config:
    values: dict = {}
    if args.conf:
        with open(args.conf) as f:
            values.update(json.load(f))
    values.update(C.parse_overrides(args.overrides))
    return C.Config(values)


def _setup_logging(conf: C.Config, topology_id: str, port: int) -> None:
    """Log to worker.log, rotated at ``worker.log.max.bytes``. Under a supervisor (stderr is
    ``worker.log.out``) nothing else is written to stderr and print() goes to the log too, so a
    chatty worker cannot fill the disk; started by hand, the worker also logs to stderr."""
    path = worker_log_path(conf[C.STORM_LOG_DIR], topology_id, port)
    try:
        out = worker_out_path(path)
        supervised = out.exists() and os.path.samestat(os.fstat(2), os.stat(out))
    except OSError:
        supervised = False
    if not supervised:
        logging.basicConfig(level=logging.INFO, format=FORMAT, stream=sys.stderr)
    for noisy in ("kazoo", "thriftpy2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    add_file_log(path, max_bytes=conf[C.WORKER_LOG_MAX_BYTES])
    if supervised:
        sys.stdout = LogWriter(logging.getLogger("STDOUT"), logging.INFO, sys.__stdout__)  # type: ignore[assignment]
        sys.stderr = LogWriter(logging.getLogger("STDERR"), logging.ERROR, sys.__stderr__)  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    conf = _load_conf(args)
    _setup_logging(conf, args.topology_id, args.port)
    from stormpy.worker.worker import Worker, WorkerStartError

    worker = Worker(conf, args.topology_id, args.supervisor_id, args.port, args.worker_id)
    drain = max(0.2, conf[C.SUPERVISOR_WORKER_SHUTDOWN_SLEEP_SECS] / 2.0)
    with StopOnSignals(who="worker") as signals:
        try:
            worker.start()
        except WorkerStartError as exc:
            log.error("worker cannot start: %s", exc)
            worker.stop(f"cannot start: {exc}", drain_secs=0)
            return 2
        except Exception:
            log.exception("worker failed to start")
            worker.stop("failed to start", drain_secs=0)
            return 1
        if not signals.wait(poll_secs=0.5, alive=lambda: not worker.fatal.is_set()):
            log.critical("worker ends: %s", worker.fatal_reason)
            worker.stop(f"framework threads failing: {worker.fatal_reason}", drain_secs=0)
            return FATAL_EXIT_CODE
        worker.stop(signals.reason("stop requested"), drain_secs=drain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
