"""Topologies' own dependencies: one virtualenv per requirements hash on each supervisor (issue 28).

``stormpy submit -r requirements.txt [--wheels DIR]`` ships the requirements (and wheels) in
the code archive under ``.stormpy-requirements/``. Before a worker of that topology starts,
the supervisor's sync thread calls :meth:`Virtualenvs.ensure`, which builds (or reuses)
``supervisor/virtualenvs/<hash>/``:

1. ``python -m venv --without-pip`` with the supervisor's own interpreter;
2. the supervisor's pip installs the requirements into it (``pip --python``), from the
   uploaded wheels (``--find-links``) and the index the supervisor is configured for
   (``supervisor.pip.index.url``), or from the wheels only (``supervisor.pip.no.index``);
3. only then a ``.pth`` file adds the supervisor's own site directories *after* the venv's,
   so ``stormpy`` (and its dependencies) import in the workers while the topology's pinned
   versions win. Writing it after the install keeps pip from "satisfying" a requirement with
   the supervisor's copy of a different version;
4. a ``.ready`` file marks the venv complete; a directory without it is a build that was
   interrupted and is rebuilt.

The hash covers the requirements text, every shipped wheel's content and the interpreter, so
two topologies that need different versions of one package get two venvs, and topologies that
agree share one. A failed install raises :class:`RequirementsError` with pip's last lines; the
caller reports it as a topology error and retries after ``supervisor.pip.retry.secs``.

Threads: called only from the supervisor's sync thread.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import site
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import stormpy
from stormpy import config as C
from stormpy.disk_layout import REQUIREMENTS_DIR, REQUIREMENTS_FILE, WHEELS_DIR, virtualenvs_root

log = logging.getLogger(__name__)

READY_MARKER = ".ready"
PTH_NAME = "stormpy-supervisor.pth"
_ERROR_LINES = 2


class RequirementsError(Exception):
    """A topology's requirements could not be installed; ``str()`` is what the user sees."""


def requirements_key(code_dir: Path) -> str | None:
    """The virtualenv key of a topology's unpacked code: None when it has no requirements."""
    base = code_dir / REQUIREMENTS_DIR
    requirements = base / REQUIREMENTS_FILE
    if not requirements.is_file():
        return None
    digest = hashlib.sha256()
    digest.update(f"{sys.implementation.cache_tag} {sys.executable}\n".encode())
    digest.update(requirements.read_bytes())
    for wheel in sorted((base / WHEELS_DIR).glob("*")) if (base / WHEELS_DIR).is_dir() else []:
        digest.update(f"\n{wheel.name} {hashlib.sha256(wheel.read_bytes()).hexdigest()}".encode())
    return digest.hexdigest()[:24]


def supervisor_site_dirs() -> list[str]:
    """Where this interpreter finds stormpy and its dependencies, for the venv's ``.pth``."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    stormpy_root = str(Path(stormpy.__file__).resolve().parent.parent)
    if stormpy_root not in dirs:
        dirs.append(stormpy_root)           # a source checkout (PYTHONPATH) rather than site-packages
    return dirs


def pip_command(venv: Path, code_dir: Path, conf: Mapping[str, Any]) -> list[str]:
    """The supervisor's pip, installing the topology's requirements into ``venv``."""
    base = code_dir / REQUIREMENTS_DIR
    argv = [sys.executable, "-m", "pip", "--python", str(venv_python(venv)), "install", "--no-input",
            "--disable-pip-version-check", "-r", str(base / REQUIREMENTS_FILE)]
    if (base / WHEELS_DIR).is_dir():
        argv += ["--find-links", str(base / WHEELS_DIR)]
    if conf.get(C.SUPERVISOR_PIP_NO_INDEX.name):
        argv.append("--no-index")
    elif conf.get(C.SUPERVISOR_PIP_INDEX_URL.name):
        argv += ["--index-url", str(conf[C.SUPERVISOR_PIP_INDEX_URL.name])]
    return argv


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python*/site-packages"))
    if not found:
        raise RequirementsError(f"virtualenv {venv} has no lib/python*/site-packages")
    return found[0]


class Virtualenvs:
    """This supervisor's topology virtualenvs under ``<storm.local.dir>/supervisor/virtualenvs``."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.conf = conf
        self.root = virtualenvs_root(conf[C.STORM_LOCAL_DIR.name])
        self.timeout_secs = float(C.read(conf, C.SUPERVISOR_PIP_TIMEOUT_SECS))
        # code dir -> key: a topology's unpacked code never changes, and hashing its wheels on
        # every slot step would read them again and again (dict get/set: safe across threads)
        self._keys: dict[str, str | None] = {}

    def key_for(self, code_dir: Path) -> str | None:
        """:func:`requirements_key`, computed once per code directory."""
        name = str(code_dir)
        if name not in self._keys:
            self._keys[name] = requirements_key(code_dir)
        return self._keys[name]

    def forget(self, code_dir: Path) -> None:
        """The code directory was deleted: its key may not be reused for new code there."""
        self._keys.pop(str(code_dir), None)

    def python_for(self, code_dir: Path) -> str | None:
        """The ready venv's interpreter for this code, None without requirements.

        Raises RequirementsError when the code has requirements but its venv is not built.
        """
        key = self.key_for(code_dir)
        if key is None:
            return None
        venv = self.root / key
        if not (venv / READY_MARKER).exists():
            raise RequirementsError(f"virtualenv {key} is not built")
        return str(venv_python(venv))

    def is_ready(self, code_dir: Path) -> bool:
        key = self.key_for(code_dir)
        return key is None or (self.root / key / READY_MARKER).exists()

    def ensure(self, topology_id: str, code_dir: Path) -> str | None:
        """Build the topology's venv unless one with its key is ready; its python (None: no requirements)."""
        key = self.key_for(code_dir)
        if key is None:
            return None
        venv = self.root / key
        if (venv / READY_MARKER).exists():
            return str(venv_python(venv))
        shutil.rmtree(venv, ignore_errors=True)      # an interrupted build: start over
        venv.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        log.info("building virtualenv %s for %s", key, topology_id)
        try:
            self._run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "creating the virtualenv")
            # in the code directory: a requirement given as a path (./wheels/x.whl) in a requirements
            # file next to the topology resolves as it did on the submitting machine
            self._run(pip_command(venv, code_dir, self.conf), "pip install -r requirements.txt", cwd=code_dir)
            site_dir = _site_packages(venv)
            dirs = ", ".join(repr(d) for d in supervisor_site_dirs())
            # after the venv's own site-packages: the topology's versions win, stormpy still imports
            # (one line, and no comprehension: site exec()s it where a nested scope cannot see ``site``)
            (site_dir / PTH_NAME).write_text(f"import site; list(map(site.addsitedir, ({dirs},)))\n")
            (venv / READY_MARKER).write_text(topology_id + "\n")
        except BaseException:
            shutil.rmtree(venv, ignore_errors=True)
            raise
        log.info("virtualenv %s for %s ready in %.1fs", key, topology_id, time.monotonic() - started)
        return str(venv_python(venv))

    def _run(self, argv: list[str], what: str, cwd: Path | None = None) -> None:
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=self.timeout_secs, check=False, cwd=cwd)
        except subprocess.TimeoutExpired:
            raise RequirementsError(f"{what} took longer than {self.timeout_secs:g}s "
                                    "(supervisor.pip.timeout.secs)") from None
        if proc.returncode != 0:
            output = proc.stdout.decode(errors="replace").strip().splitlines()
            log.warning("%s failed (exit %d):\n%s", what, proc.returncode, "\n".join(output[-40:]))
            lines = [line.strip() for line in output if line.strip()]
            errors = [line for line in lines if line.startswith("ERROR")]   # pip's own verdict, if it gave one
            raise RequirementsError(f"{what} failed (exit {proc.returncode}): "
                                    + " | ".join((errors or lines)[-_ERROR_LINES:]))

    def remove_unused(self, keys_in_use: Iterable[str]) -> None:
        """Delete venvs no topology on this supervisor needs any more."""
        if not self.root.is_dir():
            return
        keep = set(keys_in_use)
        for entry in self.root.iterdir():
            if entry.name not in keep:
                log.info("removing virtualenv %s: no topology here needs it", entry.name)
                shutil.rmtree(entry, ignore_errors=True)
