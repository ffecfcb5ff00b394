"""stormpy's version: the one place it is written.

``pyproject.toml`` reads ``__version__`` from here (setuptools dynamic version), the package
exports it as ``stormpy.__version__``, and the daemons report ``DAEMON_VERSION`` in the
``version`` fields of NimbusSummary and SupervisorInfo (the UI shows both): a PEP 440 version
whose public part is the Storm API version and whose local part names stormpy.
"""
from __future__ import annotations

__version__ = "0.1.0"

#: The Storm release whose Thrift API and behaviour stormpy follows. Clients such as streamparse
#: parse NimbusSummary.version as a PEP 440 version and take Storm-1.1+ code paths on it.
STORM_API_VERSION = "2.6.0"

DAEMON_VERSION = f"{STORM_API_VERSION}+stormpy.{__version__}"
