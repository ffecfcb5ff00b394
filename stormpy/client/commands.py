"""The operator commands: kill, activate, deactivate, rebalance, list.

Each opens one Nimbus connection, makes one call and prints one readable line (or the
``list`` table). Thrift exceptions from Nimbus (NotAliveException, ...) carry messages meant
for people; ``thrift_errors`` turns them into ``UserError`` so the CLI prints them as one
line with exit code 1.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import click
from thriftpy2.thrift import TApplicationException

from stormpy.client.nimbus_client import connect
from stormpy.errors import UserError
from stormpy.thrift import storm

log = logging.getLogger(__name__)

_THRIFT_ERRORS = (storm.NotAliveException, storm.AlreadyAliveException, storm.InvalidTopologyException,
                  storm.IllegalStateException, storm.AuthorizationException)


@contextlib.contextmanager
def thrift_errors() -> Iterator[None]:
    """Re-raise Nimbus's declared exceptions (and internal errors) as one-line UserErrors."""
    try:
        yield
    except storm.InvalidTopologyException as exc:
        raise UserError(f"invalid topology: {exc.msg}") from None
    except _THRIFT_ERRORS as exc:
        raise UserError(str(exc.msg)) from None
    except TApplicationException as exc:
        raise UserError(f"Nimbus error: {exc.message or exc}") from None


def kill(conf: Mapping[str, Any], name: str, wait_secs: int | None) -> None:
    """Kill ``name``: spouts stop now, the topology is removed after ``wait_secs``."""
    with connect(conf) as client, thrift_errors():
        client.killTopologyWithOpts(name, storm.KillOptions(wait_secs=wait_secs))
    when = "after topology.message.timeout.secs" if wait_secs is None else f"in {wait_secs}s"
    click.echo(f"Killed topology {name!r}: spouts deactivated, removal {when}")


def activate(conf: Mapping[str, Any], name: str) -> None:
    with connect(conf) as client, thrift_errors():
        client.activate(name)
    click.echo(f"Activated topology {name!r}")


def deactivate(conf: Mapping[str, Any], name: str) -> None:
    with connect(conf) as client, thrift_errors():
        client.deactivate(name)
    click.echo(f"Deactivated topology {name!r}")


def rebalance(conf: Mapping[str, Any], name: str, wait_secs: int | None, num_workers: int | None,
              executors: Mapping[str, int]) -> None:
    """Re-spread ``name`` after ``wait_secs``, optionally with new worker count / parallelism."""
    options = storm.RebalanceOptions(wait_secs=wait_secs, num_workers=num_workers,
                                     num_executors=dict(executors) or None)
    with connect(conf) as client, thrift_errors():
        client.rebalance(name, options)
    changes = []
    if num_workers is not None:
        changes.append(f"{num_workers} worker(s)")
    changes.extend(f"{comp}={n}" for comp, n in sorted(executors.items()))
    when = "after topology.message.timeout.secs" if wait_secs is None else f"in {wait_secs}s"
    click.echo(f"Rebalancing topology {name!r}{' to ' + ', '.join(changes) if changes else ''}: "
               f"executors re-spread {when}")


def format_uptime(secs: int) -> str:
    """Storm UI style: ``1d 2h 3m 4s`` (largest units only as needed)."""
    secs = max(0, int(secs))
    days, rest = divmod(secs, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((days, "d"), (hours, "h"), (minutes, "m")) if v]
    parts.append(f"{seconds}s")
    return " ".join(parts[:3]) if days else " ".join(parts)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned text table (numbers right-aligned)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], int) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()
    return "\n".join([line(list(headers)), line(["-" * w for w in widths])] + [line(r) for r in cells])


def list_topologies(conf: Mapping[str, Any]) -> None:
    """Print name, id, status, workers, executors and uptime of every topology."""
    with connect(conf) as client, thrift_errors():
        summary = client.getClusterInfo()
    if not summary.topologies:
        click.echo("No topologies running.")
        return
    topologies = sorted(summary.topologies, key=lambda t: t.name)
    rows = [[t.name, t.id, t.status, t.num_workers, t.num_executors, format_uptime(t.uptime_secs)]
            for t in topologies]
    click.echo(format_table(["NAME", "ID", "STATUS", "WORKERS", "EXECUTORS", "UPTIME"], rows))
    # Storm's sched_status: what keeps a topology from being fully served (its code missing on
    # Nimbus, a code archive a supervisor refuses, requirements not installed), under the table so scripts reading rows still can.
    for t in topologies:
        if t.sched_status:
            click.echo(f"WARNING {t.name}: {t.sched_status}")
