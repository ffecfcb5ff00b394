"""streamparse's project layout: ``config.json``, ``topologies/*.py`` and ``src/``.

A streamparse project keeps its spouts and bolts in ``src/`` (imported as top-level packages:
``from bolts.wordcount import WordCountBolt``) and its topology files in ``topologies/``; its
``config.json`` names environments (``"envs": {"prod": {"nimbus": "host:port", "options":
{...}}}``). ``stormpy local``/``submit`` recognise such a project around the topology file, put
``src/`` on ``sys.path`` and (for submit) into the code archive, and take the chosen
environment's Nimbus and ``options`` (the lowest-precedence topology config, as in ``sparse``).
"""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stormpy import config as cfg
from stormpy.errors import UserError

log = logging.getLogger(__name__)


@dataclass
class Project:
    """A streamparse project found around a topology file."""

    root: Path
    src: Path | None
    env_name: str | None             # the environment chosen (-e, or config.json's only one)
    env: dict[str, Any] = field(default_factory=dict)   # its section of config.json ("envs")

    def options(self) -> dict[str, Any]:
        """The environment's Storm ``options`` (topology config below the Topology's own)."""
        options = self.env.get("options") or {}
        if not isinstance(options, dict):
            raise UserError(f"{self.root / 'config.json'}: envs.{self.env_name}.options must be an object")
        return dict(options)

    def virtualenv_spec(self, virtualenv_name: str) -> Path | None:
        """``<virtualenv_specs>/<name>.txt`` (default ``virtualenvs/``), as ``sparse submit`` ships it.

        None when the file is absent or the environment says ``"use_virtualenv": false``.
        """
        if self.env.get("use_virtualenv") is False:
            return None
        config_file = self.root / "config.json"
        specs = (_read_config(config_file).get("virtualenv_specs") if config_file.is_file() else None) or "virtualenvs"
        spec = self.root / str(specs) / f"{self.env.get('virtualenv_name') or virtualenv_name}.txt"
        return spec if spec.is_file() else None

    def nimbus_overrides(self) -> dict[str, Any]:
        """``nimbus.seeds``/``nimbus.thrift.port`` from the environment's ``"nimbus": "host[:port]"``."""
        nimbus = str(self.env.get("nimbus") or "").strip()
        if not nimbus:
            return {}
        host, sep, port = nimbus.rpartition(":") if ":" in nimbus else (nimbus, "", "")
        if sep and not port.isdigit():
            raise UserError(f"{self.root / 'config.json'}: envs.{self.env_name}.nimbus must be host[:port], "
                            f"got {nimbus!r}")
        result: dict[str, Any] = {cfg.NIMBUS_SEEDS.name: [host]}
        if port:
            result[cfg.NIMBUS_THRIFT_PORT.name] = int(port)
        return result


def find_root(topology_file: str | Path) -> Path | None:
    """The project root: the working directory or the topology file's grandparent, whichever
    holds ``config.json`` (or ``src/`` next to a ``topologies/`` holding the file)."""
    file = Path(topology_file).resolve()
    candidates = [Path.cwd().resolve(), file.parent.parent]
    for root in candidates:
        if root not in file.parents:
            continue
        if (root / "config.json").is_file():
            return root
        if (root / "src").is_dir() and file.parent == root / "topologies":
            return root
    return None


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read streamparse config: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a streamparse config.json must be a JSON object")
    return data


def load_project(topology_file: str | Path, environment: str | None) -> Project | None:
    """The project around ``topology_file`` with its environment resolved, or None (no project)."""
    root = find_root(topology_file)
    if root is None:
        return None
    src = root / "src" if (root / "src").is_dir() else None
    config_file = root / "config.json"
    envs: dict[str, Any] = {}
    if config_file.is_file():
        envs = _read_config(config_file).get("envs") or {}
        if not isinstance(envs, dict):
            raise UserError(f"{config_file}: \"envs\" must be an object")
    env_name = environment
    if env_name is None and len(envs) == 1:
        env_name = next(iter(envs))
    if environment is not None and envs and environment not in envs:
        raise UserError(f"environment {environment!r} is not in {config_file} (envs: {', '.join(sorted(envs))})")
    env = envs.get(env_name) or {} if env_name is not None else {}
    if not isinstance(env, dict):
        raise UserError(f"{config_file}: envs.{env_name} must be an object")
    log.info("streamparse project %s%s%s", root, f", src {src}" if src else "",
             f", environment {env_name!r}" if env_name else "")
    return Project(root, src, env_name, env)


def add_src_to_path(project: Project | None) -> None:
    """Put the project's ``src/`` first on ``sys.path`` (components import from there)."""
    if project is not None and project.src is not None and str(project.src) not in sys.path:
        sys.path.insert(0, str(project.src))
