"""The PEP 517 backend: setuptools', asking for Cython only when ``STORMPY_COMPILE=1`` — so a
plain ``pip install .`` needs nothing beyond setuptools, also on a machine without a C compiler
or a network path to Cython. ``setup.py`` does the compiling."""
from __future__ import annotations

import os

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every hook not redefined here)

#: The Cython that compiled the tuple path when it was measured (docs/reference/benchmarks.md).
CYTHON = "Cython>=3.0"


def _compile_requires() -> list[str]:
    return [CYTHON] if os.environ.get("STORMPY_COMPILE", "0").strip() == "1" else []


def get_requires_for_build_wheel(config_settings: dict[str, object] | None = None) -> list[str]:
    return _setuptools.get_requires_for_build_wheel(config_settings) + _compile_requires()
