"""stormpy's version: the one place it is written.

``pyproject.toml`` reads ``__version__`` from here (setuptools dynamic version), the package
exports it as ``stormpy.__version__``, and the daemons report ``DAEMON_VERSION`` in the
``version`` fields of NimbusSummary and SupervisorInfo (the UI shows both).
"""
from __future__ import annotations

__version__ = "0.1.0"

DAEMON_VERSION = f"stormpy-{__version__}"
