"""Nimbus's disk: the upload inbox, the per-topology ``stormdist`` directories, chunked downloads.

Layout under ``<storm.local.dir>/nimbus/``:
- ``inbox/stormcode-<hex>.zip``: uploads, named by the server (clients never name a path);
  deleted after ``nimbus.inbox.jar.expiration.secs``.
- ``stormdist/<topology-id>/``: ``stormcode.zip`` (the uploaded archive of the topology file's
  directory), ``stormtopology.ser`` (serialize(StormTopology)), ``stormconf.json``. It is the
  Assignment's ``master_code_dir``; supervisors download the three files from it.

A download names a file by its absolute path or by ``<topology-id>/<file>`` relative to
``stormdist`` (standbys and supervisors use the latter: any Nimbus with the code serves it).
Only files inside ``stormdist`` can be downloaded: paths are resolved (symlinks included)
and refused when they leave it. Upload and download streams are keyed by server-chosen ids;
an idle stream is dropped after ``nimbus.file.copy.expiration.secs``. Thread-safe: the
Thrift server calls these methods from one thread per connection.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import threading
import time
import uuid
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from stormpy.disk_layout import private_dir, write_private
from stormpy.thrift import deserialize, serialize, storm

log = logging.getLogger(__name__)

CODE_FILE = "stormcode.zip"
TOPOLOGY_FILE = "stormtopology.ser"
CONF_FILE = "stormconf.json"
DOWNLOAD_CHUNK_BYTES = 1024 * 1024
MAX_OPEN_STREAMS = 64
_UPLOAD_NAME = re.compile(r"^stormcode-[0-9a-f]{32}\.zip$")


def illegal(msg: str) -> Exception:
    return storm.IllegalStateException(msg=msg)


@dataclass
class _Stream:
    path: Path
    handle: IO[bytes]
    touched: float = field(default_factory=time.monotonic)
    size: int = 0
    digest: Any = field(default_factory=hashlib.sha256)   # of the bytes written (uploads)


class NimbusFiles:
    """Uploads, stormdist and downloads of one Nimbus."""

    def __init__(self, local_dir: str | os.PathLike[str], *, max_upload_bytes: int, stream_expiration_secs: float,
                 clock: Any = time.monotonic) -> None:
        self.root = Path(local_dir).resolve() / "nimbus"
        self.inbox = self.root / "inbox"
        self.stormdist_root = self.root / "stormdist"
        self.max_upload_bytes = max_upload_bytes
        self.stream_expiration_secs = stream_expiration_secs
        self._clock = clock
        self._lock = threading.Lock()
        self._uploads: dict[str, _Stream] = {}
        self._downloads: dict[str, _Stream] = {}
        self.inbox.mkdir(parents=True, exist_ok=True)
        self.stormdist_root.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ uploads
    def begin_upload(self) -> str:
        """A new, empty upload file in the inbox; its path is the location the client echoes back."""
        self.expire_streams()
        with self._lock:
            if len(self._uploads) >= MAX_OPEN_STREAMS:
                raise illegal(f"too many uploads in progress ({MAX_OPEN_STREAMS}); try again later")
            path = self.inbox / f"stormcode-{uuid.uuid4().hex}.zip"
            self._uploads[str(path)] = _Stream(path, open(path, "wb"), self._clock())
        log.info("upload started: %s", path)
        return str(path)

    def upload_chunk(self, location: str, chunk: bytes) -> None:
        with self._lock:
            stream = self._uploads.get(location)
            if stream is None:
                raise illegal("unknown or expired upload location; call beginFileUpload first")
            if stream.size + len(chunk) > self.max_upload_bytes:
                self._abort(location, stream)
                raise illegal(f"upload exceeds nimbus.file.upload.max.bytes ({self.max_upload_bytes} bytes); "
                              "it was discarded")
            stream.handle.write(chunk)
            stream.digest.update(chunk)
            stream.size += len(chunk)
            stream.touched = self._clock()

    def finish_upload(self, location: str) -> str:
        """Close the upload; returns the SHA-256 (hex) of its bytes."""
        with self._lock:
            stream = self._uploads.pop(location, None)
            if stream is None:
                raise illegal("unknown or expired upload location; call beginFileUpload first")
            stream.handle.close()
        log.info("upload finished: %s (%d bytes)", location, stream.size)
        return stream.digest.hexdigest()

    def discard_upload(self, location: str) -> None:
        """Delete a finished upload of the inbox (one that no submit or recovery will use)."""
        path = Path(location)
        if path.parent == self.inbox and _UPLOAD_NAME.match(path.name):
            path.unlink(missing_ok=True)

    def _abort(self, location: str, stream: _Stream) -> None:
        self._uploads.pop(location, None)
        stream.handle.close()
        stream.path.unlink(missing_ok=True)

    def uploaded_file(self, location: str) -> Path:
        """The finished upload at ``location``; InvalidTopologyException for anything else."""
        path = Path(location)
        with self._lock:
            in_progress = location in self._uploads
        if (in_progress or path.parent != self.inbox or not _UPLOAD_NAME.match(path.name)
                or not path.is_file() or path.is_symlink()):
            raise storm.InvalidTopologyException(
                msg=f"uploaded code location {location!r} is not a finished upload of this Nimbus "
                    "(upload with beginFileUpload/uploadChunk/finishFileUpload first)")
        return path

    # ------------------------------------------------------------ stormdist
    def stormdist(self, topology_id: str) -> Path:
        """``stormdist/<topology-id>`` (the id must be a plain name)."""
        if not topology_id or "/" in topology_id or topology_id in (".", "..") or "\x00" in topology_id:
            raise ValueError(f"bad topology id {topology_id!r}")
        return self.stormdist_root / topology_id

    def setup_stormdist(self, topology_id: str, upload: Path, topology: storm.StormTopology,
                        conf: Mapping[str, Any]) -> Path:
        """Move the upload and write the topology and conf into ``stormdist/<id>`` atomically."""
        check_code_archive(upload)
        target = self.stormdist(topology_id)
        tmp = self.stormdist_root / f".tmp-{topology_id}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            # 0700 dir, 0600 conf: the topology's config can carry credentials (its
            # topology.environment, topology.worker.control.token)
            private_dir(tmp)
            shutil.move(str(upload), tmp / CODE_FILE)
            (tmp / TOPOLOGY_FILE).write_bytes(serialize(topology))
            write_private(tmp / CONF_FILE, json.dumps(dict(conf), sort_keys=True))
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target

    def has_code(self, topology_id: str) -> bool:
        return (self.stormdist(topology_id) / CONF_FILE).is_file()

    def code_digests(self, topology_id: str) -> dict[str, str]:
        """SHA-256 (hex) of each code file in ``stormdist/<id>``: recorded in ZooKeeper at submit,
        so that a copy a supervisor offers back after a loss can be checked byte for byte."""
        return {name: _sha256(self.stormdist(topology_id) / name) for name in (CODE_FILE, TOPOLOGY_FILE, CONF_FILE)}

    def adopt_recovered(self, topology_id: str, name: str, upload: Path, expected: dict[str, str]) -> bool:
        """Move a finished upload whose digest matched ``expected[name]`` into the topology's
        recovery directory; once all three files are there (and the archive passes
        ``check_code_archive``), it becomes ``stormdist/<id>``. True when the code is complete."""
        if name not in (CODE_FILE, TOPOLOGY_FILE, CONF_FILE):
            raise ValueError(f"not a code file: {name!r}")
        staging = self.stormdist_root / f".tmp-recover-{self.stormdist(topology_id).name}"
        staging.mkdir(parents=True, exist_ok=True)
        shutil.move(str(upload), staging / name)
        names = (CODE_FILE, TOPOLOGY_FILE, CONF_FILE)
        if not all((staging / n).is_file() for n in names):
            return False
        if any(_sha256(staging / n) != expected.get(n) for n in names):   # re-checked on disk
            shutil.rmtree(staging, ignore_errors=True)
            return False
        check_code_archive(staging / CODE_FILE)
        target = self.stormdist(topology_id)
        if target.exists():
            shutil.rmtree(staging, ignore_errors=True)
            return True
        os.rename(staging, target)
        return True

    def read_topology(self, topology_id: str) -> storm.StormTopology | None:
        try:
            return deserialize(storm.StormTopology, (self.stormdist(topology_id) / TOPOLOGY_FILE).read_bytes())
        except (OSError, ValueError):
            return None

    def read_conf_json(self, topology_id: str) -> str | None:
        try:
            return (self.stormdist(topology_id) / CONF_FILE).read_text()
        except (OSError, ValueError):
            return None

    def stormdist_ids(self) -> list[str]:
        """Topology ids with code on disk (temporary directories excluded)."""
        try:
            return sorted(p.name for p in self.stormdist_root.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return []

    def remove_stormdist(self, topology_id: str) -> None:
        shutil.rmtree(self.stormdist(topology_id), ignore_errors=True)

    def cleanup_temporaries(self) -> None:
        """Remove half-written ``.tmp-*`` directories left by a crash during submit."""
        for path in self.stormdist_root.glob(".tmp-*"):
            shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------ downloads
    def begin_download(self, file: str) -> str:
        """A download id for ``file``, which must be a regular file inside stormdist."""
        self.expire_streams()
        path = self._safe_download_path(file)
        with self._lock:
            if len(self._downloads) >= MAX_OPEN_STREAMS:
                raise illegal(f"too many downloads in progress ({MAX_OPEN_STREAMS}); try again later")
            download_id = uuid.uuid4().hex
            self._downloads[download_id] = _Stream(path, open(path, "rb"), self._clock())
        return download_id

    def _safe_download_path(self, file: str) -> Path:
        refused = illegal(f"file {file!r} cannot be downloaded: only topology code under Nimbus's stormdist can")
        if not file or "\x00" in file or ".." in Path(file).parts:
            raise refused
        candidate = Path(file)
        if not candidate.is_absolute():
            # "<topology-id>/<file>": what another Nimbus or a supervisor asks for without
            # knowing where this Nimbus keeps its stormdist (several Nimbus daemons, HA).
            candidate = self.stormdist_root / candidate
        try:
            path = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            raise refused from None
        root = self.stormdist_root.resolve()
        if root not in path.parents or not stat.S_ISREG(path.stat().st_mode):
            raise refused
        return path

    def download_chunk(self, download_id: str) -> bytes:
        """The next chunk; an empty result means the end (and closes the stream)."""
        with self._lock:
            stream = self._downloads.get(download_id)
            if stream is None:
                raise illegal("unknown or expired download id; call beginFileDownload first")
            data = stream.handle.read(DOWNLOAD_CHUNK_BYTES)
            stream.touched = self._clock()
            if not data:
                stream.handle.close()
                del self._downloads[download_id]
        return data

    # ------------------------------------------------------------ housekeeping
    def expire_streams(self) -> int:
        """Drop upload/download streams idle for ``nimbus.file.copy.expiration.secs``."""
        now = self._clock()
        dropped = 0
        with self._lock:
            for table in (self._uploads, self._downloads):
                for key, stream in list(table.items()):
                    if now - stream.touched >= self.stream_expiration_secs:
                        stream.handle.close()
                        if table is self._uploads:
                            stream.path.unlink(missing_ok=True)
                        del table[key]
                        dropped += 1
        if dropped:
            log.info("dropped %d idle upload/download streams", dropped)
        return dropped

    def cleanup_inbox(self, expiration_secs: float, now: float | None = None) -> list[str]:
        """Delete finished uploads older than ``expiration_secs`` (by mtime); returns their names."""
        now = time.time() if now is None else now
        with self._lock:
            open_paths = {s.path for s in self._uploads.values()}
        removed = []
        for path in self.inbox.iterdir():
            try:
                if path not in open_paths and now - path.lstat().st_mtime >= expiration_secs:
                    path.unlink()
                    removed.append(path.name)
            except OSError as exc:
                log.debug("inbox cleanup skipped %s: %s", path, exc)
        if removed:
            log.info("deleted %d expired uploads from %s", len(removed), self.inbox)
        return removed


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_code_archive(path: Path) -> None:
    """A topology archive must be a zip whose members stay inside the extraction directory."""
    bad = storm.InvalidTopologyException
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename
                parts = Path(name.replace("\\", "/")).parts
                if name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":"):
                    raise bad(msg=f"topology archive holds an unsafe path {name!r}")
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise bad(msg=f"topology archive holds a symlink {name!r}; symlinks are not allowed")
    except zipfile.BadZipFile:
        raise bad(msg="uploaded topology code is not a zip archive") from None
