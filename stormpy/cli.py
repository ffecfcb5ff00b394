"""The ``stormpy`` command: parse argv, build a daemon or client call, wait for it or a signal.

Each command only parses options and hands a ``Config`` to the module that does the work
(imported lazily, so ``stormpy list`` does not import PySpark). Errors a user can act on
(``UserError``, ``ConfigError``) become one line on stderr and exit code 1, never a traceback.
"""
from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from stormpy.config import Config, ConfigError, load_config, parse_overrides, warn_unknown_keys
from stormpy.errors import UserError
from stormpy.version import __version__

log = logging.getLogger(__name__)


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"stormpy: error: {message}", err=True)
    sys.exit(code)


def config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config FILE`` and ``-c key=value`` to a command and pass a loaded ``conf``."""

    @click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                  help="A storm.yaml file whose keys override the defaults.")
    @click.option("-c", "overrides", multiple=True, metavar="KEY=VALUE",
                  help="Override a config key (value parsed as YAML), repeatable.")
    @functools.wraps(func)
    def wrapper(*args: Any, config_file: str | None, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        try:
            user_overrides = parse_overrides(overrides)
            conf = load_config(config_file, user_overrides)
        except ConfigError as exc:
            _fail(str(exc))
        warn_unknown_keys(conf, log)   # defaults are all known: only the file's and -c keys can warn
        try:
            # Every command, daemon or client, refuses a missing, short or world-readable secret
            # file before doing anything (``stormpy.auth.read_secret``).
            from stormpy.auth import read_secret

            read_secret(conf)
            return func(*args, conf=conf, user_overrides=user_overrides, **kwargs)
        except (UserError, ConfigError) as exc:
            _fail(str(exc), getattr(exc, "exit_code", 1))
        except KeyboardInterrupt:
            sys.exit(130)

    return wrapper


def _parallelism(values: tuple[str, ...]) -> dict[str, int]:
    result: dict[str, int] = {}
    for item in values:
        name, sep, num = item.partition("=")
        if not sep or not name or not num.strip().isdigit() or int(num) < 1:
            raise UserError(f"-e expects COMPONENT=PARALLELISM with a positive number, got {item!r}")
        result[name] = int(num)
    return result


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
@click.version_option(__version__, "--version", prog_name="stormpy", message="%(prog)s %(version)s")
def main(verbose: bool) -> None:
    """stormpy: Apache Storm, rebuilt in Python."""
    from stormpy.logs import setup_cli_logging

    setup_cli_logging(logging.DEBUG if verbose else logging.INFO)


# ---------------------------------------------------------------- daemons

@main.command("dev-zookeeper")
@click.option("--zookeeper-home", default=None, type=click.Path(file_okay=False),
              help="A ZooKeeper distribution to run (dev.zookeeper.home, else $ZOOKEEPER_HOME; "
                   "default: the pyspark wheel's jars).")
@config_options
def dev_zookeeper(zookeeper_home: str | None, conf: Config, user_overrides: dict[str, Any]) -> None:
    """Run a development ZooKeeper from a ZooKeeper distribution or the pyspark wheel's jars.

    \b
    Jars:   --zookeeper-home / dev.zookeeper.home / $ZOOKEEPER_HOME, else pyspark (the spark extra)
    Port:   storm.zookeeper.port (2181)
    Data:   dev.zookeeper.path (/tmp/dev-storm-zookeeper), locked against a second server
    Log:    <dev.zookeeper.path>/zookeeper.log
    """
    from stormpy.devzk import run_dev_zookeeper

    if zookeeper_home is not None:
        conf = conf.merged({"dev.zookeeper.home": zookeeper_home})
    sys.exit(run_dev_zookeeper(conf))


@main.command()
@config_options
def nimbus(conf: Config, user_overrides: dict[str, Any]) -> None:
    """Run Nimbus: the Thrift master that schedules topologies.

    \b
    Port:   nimbus.thrift.port (6627)
    Data:   <storm.local.dir>/nimbus/ (storm-local/nimbus/): code, uploads, lock
    Log:    <storm.log.dir>/nimbus.log (logs/nimbus.log)
    """
    from stormpy.nimbus.daemon import run_nimbus

    sys.exit(run_nimbus(conf))


@main.command()
@config_options
def supervisor(conf: Config, user_overrides: dict[str, Any]) -> None:
    """Run a supervisor: launches and watches this host's worker processes.

    \b
    Ports:  supervisor.slots.ports (6700-6703) for workers, logviewer.port (8000) for worker logs
    Data:   <storm.local.dir>/supervisor/ (storm-local/supervisor/): id, local state, lock
    Log:    <storm.log.dir>/supervisor.log; workers: <storm.log.dir>/workers-artifacts/<id>/<port>/worker.log
    """
    from stormpy.supervisor.daemon import run_supervisor

    sys.exit(run_supervisor(conf))


@main.command()
@config_options
def ui(conf: Config, user_overrides: dict[str, Any]) -> None:
    """Run the web UI, its JSON API (/api/v1/) and /metrics (Prometheus) over Nimbus.

    \b
    Port:   ui.port (8080) on ui.host (0.0.0.0); Nimbus at nimbus.seeds:nimbus.thrift.port
    Data:   <storm.local.dir>/ui/ (lock only)
    Log:    <storm.log.dir>/ui.log (logs/ui.log)
    """
    from stormpy.ui.server import run_ui

    sys.exit(run_ui(conf))


@main.command("ui-passwd")
@click.argument("user")
@click.option("--file", "users_file", type=click.Path(dir_okay=False), default=None,
              help="The users file to edit (default: ui.users.file of the config).")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin's first line, not a prompt.")
@config_options
def ui_passwd(user: str, users_file: str | None, password_stdin: bool, conf: Config,
              user_overrides: dict[str, Any]) -> None:
    """Add or change a UI / log viewer login in ui.users.file (scrypt hash; file kept 0600).

    The password is asked twice (or read from stdin), never taken as an argument.
    """
    from stormpy.auth import set_user_password
    from stormpy.config import UI_USERS_FILE

    path = users_file or conf.get(UI_USERS_FILE)
    if not path:
        raise UserError("no users file: pass --file FILE or set ui.users.file")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt(f"Password for {user}", hide_input=True, confirmation_prompt=True)
    replaced = set_user_password(path, user, password)
    click.echo(f"{'changed' if replaced else 'added'} UI user {user!r} in {path}")


@main.command()
@click.argument("kind", type=click.Choice(["ca", "host", "user"]))
@click.argument("name", required=False)
@click.option("--dir", "directory", type=click.Path(file_okay=False), default="stormpy-certs",
              help="Where the CA is (or goes) and the certificates are written.")
@click.option("--host", "hosts", multiple=True, metavar="NAME_OR_IP",
              help="A DNS name or IP address of the host (repeatable; default: NAME).")
@click.option("--group", "groups", multiple=True, help="A group of the user (an OU of the certificate; repeatable).")
@click.option("--days", type=click.IntRange(1), default=None, help="Validity (default: CA 3650, others 825).")
@config_options
def certs(kind: str, name: str | None, directory: str, hosts: tuple[str, ...], groups: tuple[str, ...],
          days: int | None, conf: Config, user_overrides: dict[str, Any]) -> None:
    """Make a small CA (ca), or a host or user certificate signed by it, for storm.tls.* keys.

    The certificate's CN is NAME: for users it is the principal of nimbus.admins / topology.users.
    """
    from stormpy.certs import make_ca, make_cert

    if kind == "ca":
        path = make_ca(directory, name or "stormpy CA", days or 3650)
    elif not name:
        raise UserError(f"stormpy certs {kind} needs a NAME (the certificate's CN)")
    else:
        path = make_cert(directory, name, (hosts or (name,)) if kind == "host" else (), groups, days or 825)
    click.echo(f"wrote {path}" + ("" if kind == "ca" else f" and {str(path)[:-4]}-key.pem"))


@main.command("spark-archive")
@config_options
def spark_archive(conf: Config, user_overrides: dict[str, Any]) -> None:
    """Record Spark's classes in a class-data-sharing archive: Spark drivers then start faster.

    \b
    Runs a small local Spark job (30-60 s) whose JVM writes the classes it loaded (about 180 MB);
    every SparkSession stormpy starts on this host with the same storm.local.dir then maps them
    (session and first write 5.9 s instead of 10.9 s on 2 cores). Run it again after upgrading
    Java or pyspark, as the supervisor's user with its environment.
    File:   <storm.local.dir>/spark/spark-classes-<java and pyspark digest>.jsa
    """
    from stormpy.spark.class_archive import create_archive

    click.echo("recording the classes a Spark driver loads (a local Spark job) ...")
    started = time.monotonic()
    path = create_archive(conf, progress=click.echo)
    click.echo(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - started:.0f} s; "
               "Spark drivers stormpy starts with this storm.local.dir now map it")


# ---------------------------------------------------------------- topologies

@main.command()
@click.argument("topology_file", type=click.Path(dir_okay=False))
@click.option("--name", default=None, help="Topology name (default: the file's stem).")
@click.option("--duration", type=float, default=0, show_default=True,
              help="Seconds to run; 0 runs until Ctrl-C.")
@click.option("-e", "--environment", default=None,
              help="streamparse environment: picks par={env: n} dicts and config.json's envs.<env>.")
@config_options
def local(topology_file: str, name: str | None, duration: float, environment: str | None, conf: Config,
          user_overrides: dict[str, Any]) -> None:
    """Run a topology in this process, without a cluster."""
    from stormpy.local.runner import run_local

    sys.exit(run_local(topology_file, name=name, duration=duration, conf=conf, user_overrides=user_overrides,
                       environment=environment))


@main.command()
@click.argument("topology_file", type=click.Path(dir_okay=False))
@click.option("--name", default=None, help="Topology name (default: the file's stem).")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes (topology.workers).")
@click.option("--inactive", is_flag=True, help="Submit with status INACTIVE.")
@click.option("-e", "--environment", default=None,
              help="streamparse environment: picks par={env: n} dicts and config.json's envs.<env> "
                   "(nimbus, options).")
@click.option("-r", "--requirements", default=None, type=click.Path(dir_okay=False),
              help="pip requirements of the topology: every supervisor installs them into a virtualenv "
                   "(one per requirements hash) its workers run in. Default in a streamparse project: "
                   "virtualenvs/<name>.txt.")
@click.option("--wheels", default=None, type=click.Path(file_okay=False),
              help="A directory of wheels uploaded with the topology, for -r to install from "
                   "(offline clusters: supervisor.pip.no.index).")
@config_options
def submit(topology_file: str, name: str | None, workers: int | None, inactive: bool, environment: str | None,
           requirements: str | None, wheels: str | None, conf: Config, user_overrides: dict[str, Any]) -> None:
    """Upload a topology's code to Nimbus and start it."""
    from stormpy.client.submit import submit_topology_file

    submit_topology_file(topology_file, name=name, workers=workers, inactive=inactive, conf=conf,
                         user_overrides=user_overrides, environment=environment, requirements=requirements,
                         wheels=wheels)


@main.command()
@click.argument("name")
@click.option("-w", "--wait", "wait_secs", type=click.IntRange(min=0), default=None,
              help="Seconds between deactivating spouts and removing the topology.")
@config_options
def kill(name: str, wait_secs: int | None, conf: Config, user_overrides: dict[str, Any]) -> None:
    """Kill a running topology."""
    from stormpy.client import commands

    commands.kill(conf, name, wait_secs)


@main.command()
@click.argument("name")
@config_options
def activate(name: str, conf: Config, user_overrides: dict[str, Any]) -> None:
    """Activate a topology's spouts."""
    from stormpy.client import commands

    commands.activate(conf, name)


@main.command()
@click.argument("name")
@config_options
def deactivate(name: str, conf: Config, user_overrides: dict[str, Any]) -> None:
    """Deactivate a topology's spouts."""
    from stormpy.client import commands

    commands.deactivate(conf, name)


@main.command()
@click.argument("name")
@click.option("-w", "--wait", "wait_secs", type=click.IntRange(min=0), default=None,
              help="Seconds to stay REBALANCING before executors are re-spread.")
@click.option("-n", "--num-workers", "num_workers", type=click.IntRange(min=1), default=None,
              help="New number of worker processes.")
@click.option("-e", "--executor", "executors", multiple=True, metavar="COMPONENT=PARALLELISM",
              help="New parallelism of a component, repeatable.")
@config_options
def rebalance(name: str, wait_secs: int | None, num_workers: int | None, executors: tuple[str, ...],
              conf: Config, user_overrides: dict[str, Any]) -> None:
    """Re-spread a topology's executors, optionally with new worker count / parallelism."""
    from stormpy.client import commands

    commands.rebalance(conf, name, wait_secs, num_workers, _parallelism(executors))


@main.command()
@click.argument("name")
@click.option("--component", default=None, help="Only this component's errors (default: every component).")
@config_options
def errors(name: str, component: str | None, conf: Config, user_overrides: dict[str, Any]) -> None:
    """Show a topology's last errors per component: time, host, port and message (Storm's get-errors)."""
    from stormpy.client import ops

    ops.show_errors(conf, name, component)


@main.command()
@click.argument("name")
@click.option("--component", default=None, help="Only the workers running this component (default: all).")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("-n", "--lines", "lines", type=click.IntRange(min=0), default=40, help="Last lines to print per worker.")
@config_options
def logs(name: str, component: str | None, follow: bool, lines: int, conf: Config,
         user_overrides: dict[str, Any]) -> None:
    """Print a topology's worker logs, read through the supervisors' log viewers (logviewer.port)."""
    from stormpy.client import ops

    ops.show_logs(conf, name, component, lines, follow)


@main.command()
def version() -> None:
    """Print stormpy's version."""
    click.echo(f"stormpy {__version__}")


@main.command("list")
@config_options
def list_(conf: Config, user_overrides: dict[str, Any]) -> None:
    """List the topologies on the cluster."""
    from stormpy.client import commands

    commands.list_topologies(conf)


if __name__ == "__main__":
    main()
