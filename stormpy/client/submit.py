"""``stormpy submit TOPO.py``: load, compile and validate locally, upload the code, submit.

Everything that can be checked on the user's machine is checked before a byte is uploaded
(syntax errors, no Topology class, invalid wiring: the same validator Nimbus runs), so
mistakes surface as one line in seconds. The code archive is the topology file's directory
(without VCS data, virtualenvs and caches), which is what workers import the file's
module from; the module name travels in the conf as ``topology.module``.

Config precedence, lowest first: the Topology class's ``config``, ``--workers``, then every
``-c key=value`` (Storm keys and user keys alike).
"""
from __future__ import annotations

import getpass
import json
import logging
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from stormpy import config as cfg
from stormpy.client.nimbus_client import connect
from stormpy.client.commands import thrift_errors
from stormpy.disk_layout import REQUIREMENTS_DIR, REQUIREMENTS_FILE, WHEELS_DIR
from stormpy.errors import UserError
from stormpy.thrift import storm

log = logging.getLogger(__name__)

UPLOAD_CHUNK_BYTES = 512 * 1024
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox",
                       ".mypy_cache", ".pytest_cache", ".ruff_cache", "node_modules", ".idea", ".vscode",
                       "storm-local", "logs"})
SKIP_SUFFIXES = (".pyc", ".pyo")


def _is_virtualenv(path: Path) -> bool:
    return (path / "pyvenv.cfg").exists() or (path / "bin" / "activate").exists()


def code_files(root: Path) -> Iterator[tuple[Path, str]]:
    """(file, archive name) of every file to ship, skipping VCS data, virtualenvs and caches.

    Symlinks are skipped: an archive must not point outside itself (Nimbus refuses them).
    """
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not (here / d).is_symlink()
                             and not _is_virtualenv(here / d))
        for name in sorted(filenames):
            path = here / name
            if name.endswith(SKIP_SUFFIXES) or path.is_symlink() or not path.is_file():
                continue
            yield path, path.relative_to(root).as_posix()


# pip options that name other files: those files do not travel with the topology
_REFUSED_REQUIREMENT_OPTIONS = ("-r", "--requirement", "-c", "--constraint", "-e", "--editable")


def check_requirements(requirements: Path) -> None:
    """One-line errors for a requirements file the supervisors could not use."""
    try:
        lines = requirements.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read requirements file {requirements}: {exc}") from None
    for number, line in enumerate(lines, 1):
        word = line.strip().split(" ", 1)[0].split("=", 1)[0]
        if word in _REFUSED_REQUIREMENT_OPTIONS:
            raise UserError(f"{requirements}:{number}: {word} names a file that is not shipped with the topology; "
                            "put its requirements in this file (and local packages in --wheels DIR)")


def requirement_files(requirements: Path | None, wheels: Path | None) -> list[tuple[Path, str]]:
    """(file, archive name) of the requirements file and the wheels shipped with it."""
    if requirements is None:
        if wheels is not None:
            raise UserError("--wheels needs -r REQUIREMENTS: the wheels are what the requirements install from")
        return []
    if not requirements.is_file():
        raise UserError(f"requirements file {requirements} not found")
    check_requirements(requirements)
    base = f"{REQUIREMENTS_DIR}/"
    files = [(requirements, base + REQUIREMENTS_FILE)]
    if wheels is not None:
        if not wheels.is_dir():
            raise UserError(f"--wheels {wheels} is not a directory")
        found = sorted(wheels.glob("*.whl")) + sorted(wheels.glob("*.tar.gz"))
        if not found:
            raise UserError(f"--wheels {wheels} holds no *.whl or *.tar.gz")
        files += [(path, f"{base}{WHEELS_DIR}/{path.name}") for path in found]
    return files


def build_code_archive(topology_file: Path, target: Path, src: Path | None = None,
                       extra_files: list[tuple[Path, str]] | None = None) -> int:
    """Zip the topology file's directory into ``target``; returns the archive size in bytes.

    ``src`` (a streamparse project's ``src/``) is added at the archive's root too, as
    streamparse's JAR puts it in ``resources/``: workers import its packages top-level.
    ``extra_files`` (the requirements and wheels of ``-r``/``--wheels``) go in as named.
    """
    root = topology_file.resolve().parent
    count = 0
    names: dict[str, Path] = {}
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for base in (root, src) if src is not None else (root,):
            for path, arcname in code_files(base):
                if path.resolve() == target.resolve() or arcname.startswith(f"{REQUIREMENTS_DIR}/"):
                    continue
                if arcname in names:
                    raise UserError(f"{path} and {names[arcname]} would both be {arcname!r} in the code "
                                    "archive (src/ is merged with the topology's directory); rename one")
                names[arcname] = path
                archive.write(path, arcname)
                count += 1
        for path, arcname in extra_files or []:
            archive.write(path, arcname)
            count += 1
    log.debug("archived %d files of %s", count, root)
    return target.stat().st_size


def topology_conf(topology_cls: type, topology_file: Path, workers: int | None,
                  user_overrides: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """streamparse env options <- Topology.config <- --workers <- -c overrides, plus the module
    name workers import."""
    from stormpy.api.compile import topology_config

    conf = {**dict(options or {}), **topology_config(topology_cls)}
    cfg.warn_unknown_keys(conf, log)       # the topology's own config; -c keys were checked by the CLI
    if workers is not None:
        conf[cfg.TOPOLOGY_WORKERS.name] = workers
    conf.update(user_overrides)
    conf[cfg.TOPOLOGY_MODULE.name] = topology_file.stem
    conf.setdefault(cfg.TOPOLOGY_SUBMITTER_USER.name, _user())
    return conf


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user database entry (containers)
        return ""


def prepare(path: str, name: str | None, workers: int | None, user_overrides: Mapping[str, Any],
            project: Any = None, environment: str | None = None) -> tuple[str, Any, dict[str, Any]]:
    """Load, compile and validate the topology locally: (name, StormTopology, conf)."""
    from stormpy.api.compile import build_topology
    from stormpy.api.loader import load_topology_file
    from stormpy.streamparse_compat.project import add_src_to_path

    topology_file = Path(path)
    add_src_to_path(project)
    topology_cls = load_topology_file(topology_file)
    name = name or topology_file.stem
    if project is not None:
        environment = project.env_name
    with thrift_errors():
        conf = topology_conf(topology_cls, topology_file, workers, user_overrides,
                             project.options() if project is not None else None)
        topology = build_topology(topology_cls, name, conf, environment=environment)
    try:
        json.dumps(conf)
    except (TypeError, ValueError) as exc:
        raise UserError(f"topology config is not JSON-serializable: {exc}") from None
    return name, topology, conf


def upload(client: Any, archive: Path, size: int) -> str:
    """Upload ``archive`` in chunks with a progress bar on stderr; returns Nimbus's location."""
    location = client.beginFileUpload()
    with open(archive, "rb") as fh, click.progressbar(length=size, label="Uploading topology code",
                                                      file=sys.stderr, show_pos=False) as bar:
        while True:
            chunk = fh.read(UPLOAD_CHUNK_BYTES)
            if not chunk:
                break
            client.uploadChunk(location, chunk)
            bar.update(len(chunk))
    client.finishFileUpload(location)
    return location


def submit_topology_file(path: str, *, name: str | None = None, workers: int | None = None,
                         inactive: bool = False, conf: cfg.Config, user_overrides: Mapping[str, Any],
                         environment: str | None = None, requirements: str | None = None,
                         wheels: str | None = None) -> str:
    """The whole ``stormpy submit``; returns the topology id. Failures raise UserError.

    In a streamparse project the chosen environment's ``nimbus`` from config.json is used
    unless ``-c nimbus.seeds=...`` was given, and ``virtualenvs/<name>.txt`` is the
    requirements file unless ``-r`` names one (as ``sparse submit`` does). The requirements
    (and ``--wheels``) travel in the code archive; each supervisor installs them into a
    virtualenv per requirements hash, in which the topology's workers run."""
    from stormpy.streamparse_compat.project import load_project

    project = load_project(path, environment)
    name, topology, topo_conf = prepare(path, name, workers, user_overrides, project, environment)
    if requirements is None and project is not None:
        spec = project.virtualenv_spec(name)
        if spec is not None:
            log.info("requirements from streamparse's %s", spec)
            requirements = str(spec)
    extra_files = requirement_files(Path(requirements) if requirements else None, Path(wheels) if wheels else None)
    if project is not None:
        nimbus = {k: v for k, v in project.nimbus_overrides().items() if k not in user_overrides}
        if nimbus:
            conf = conf.merged(nimbus)
    status = storm.TopologyInitialStatus.INACTIVE if inactive else storm.TopologyInitialStatus.ACTIVE
    with tempfile.TemporaryDirectory(prefix="stormpy-submit-") as tmp:
        archive = Path(tmp) / "stormcode.zip"
        size = build_code_archive(Path(path), archive, project.src if project is not None else None, extra_files)
        with connect(conf) as client, thrift_errors():
            if any(t.name == name for t in client.getClusterInfo().topologies):
                raise UserError(f"topology {name!r} is already alive; kill it first or submit with another --name")
            location = upload(client, archive, size)
            client.submitTopologyWithOpts(name, location, json.dumps(topo_conf), topology,
                                          storm.SubmitOptions(initial_status=status))
            topology_id = _find_id(client, name)
    state = "INACTIVE" if inactive else "ACTIVE"
    click.echo(f"Submitted topology {name!r} as {topology_id} ({state}, "
               f"{topo_conf.get(cfg.TOPOLOGY_WORKERS.name, 1)} worker(s), {size} bytes of code)")
    return topology_id


def _find_id(client: Any, name: str) -> str:
    for summary in client.getClusterInfo().topologies:
        if summary.name == name:
            return summary.id
    return name
