"""Errors a person can act on: the CLI prints their message as one line and exits non-zero."""
from __future__ import annotations


class UserError(Exception):
    """Bad input or an unreachable service; ``str(exc)`` is the whole message shown to the user."""

    exit_code = 1


class TopologyFileError(UserError):
    """A topology file that cannot be loaded: missing, syntax error, no Topology subclass."""
