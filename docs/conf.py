"""Sphinx configuration of stormpy's documentation site.

Build it with ``pip install -e '.[docs]' && sphinx-build -W -b html docs docs/_build``. ``-W``
makes every warning an error: a page that links a config key, CLI option, Thrift name or page
that no longer exists fails the build (and CI, which runs the same command).
"""
from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))            # the stormpy being documented, not an installed copy
sys.path.insert(0, str(DOCS / "_ext"))

from stormpy.version import __version__  # noqa: E402

project = "stormpy"
author = "the stormpy authors"
copyright = "2026, the stormpy authors"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
    "sphinxcontrib.mermaid",
    "stormpy_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "snippets", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
myst_fence_as_directive = ["mermaid"]

# Plain `backticks` in docstrings and config docs read as code, as they do in the README.
default_role = "literal"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_mock_imports: list[str] = []

html_theme = "furo"
html_title = f"stormpy {release}"
html_static_path = ["_static"]

# The site links nothing it cannot check; `linkcheck` is not part of -W.
suppress_warnings: list[str] = []
