"""Build a small pure-Python wheel without network or build backends, for offline install tests.

``stormpy submit -r ... --wheels DIR`` installs from wheels shipped with the topology; tests
(ours and users') need real wheels of a package in two versions, built where no index is
reachable. A wheel is a zip with a ``.dist-info`` directory (``METADATA``, ``WHEEL``,
``RECORD`` with sha256 digests, PEP 427); pip installs what this writes like any other.

Threads: pure function, any thread.
"""
from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(data)}"


def build_wheel(out_dir: str | Path, name: str, version: str, files: Mapping[str, str] | None = None) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` into ``out_dir`` and return its path.

    ``files`` maps paths inside the wheel to their text; by default one module ``<name>.py``
    holding ``__version__ = "<version>"``, which is what a test imports to see which version won.
    """
    project = re.sub(r"[-_.]+", "_", name)
    files = dict(files or {f"{project}.py": f'__version__ = "{version}"\n'})
    dist_info = f"{project}-{version}.dist-info"
    files[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files[f"{dist_info}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: stormpy.testing.wheels\n"
                                   "Root-Is-Purelib: true\nTag: py3-none-any\n")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{project}-{version}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, text in files.items():
            data = text.encode()
            archive.writestr(path, data)
            records.append(f"{path},{_record_hash(data)}")
        records.append(f"{dist_info}/RECORD,,")
        archive.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return wheel
