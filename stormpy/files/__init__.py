"""stormpy.files: :class:`DirectorySpout`, the records of files dropped in a directory (Storm's HdfsSpout)."""
from __future__ import annotations

from stormpy.files.spout import DirectorySpout

__all__ = ["DirectorySpout"]
