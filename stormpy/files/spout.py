"""DirectorySpout: the records of files dropped in a directory (Storm's HdfsSpout, on a local or
mounted directory).

Files whose names match ``pattern`` are read one at a time per task, oldest name first. Writers
must make a file appear complete: write it as ``name.tmp`` or ``name.COPYING`` (or anywhere
outside the directory) and rename it when done; names ending in ``ignore_suffixes`` are never
read, so a half-written file is not picked up.

- Locking: a task owns a file through ``<dir>/.lock/<name>.lock``, created exclusively
  (``O_CREAT|O_EXCL``) and touched every few seconds. Two tasks never read one file; a lock not
  touched for ``lock_timeout_secs`` belongs to a dead task and is taken over.
- Progress: ``<dir>/.lock/<name>.progress`` (a JSON sidecar, replaced atomically) holds the
  byte offset and line number of the first line not yet acked, so a task that takes a file
  over (after a worker was killed) resumes there: every line is acked at least once, and lines
  acked before the kill are not read again unless they were behind an un-acked one.
- Finished (read to the end and every line acked): the file moves to ``done/``. A line the
  reader cannot decode or parse sends the file to ``bad/`` (the reason in the log and as the
  component's error) and the spout goes on with the next file.

A line becomes a tuple through ``reader``: a function ``line -> values | None`` with the field
names it emits, given as ``(func, fields)``; by default the tuple is ``[line]`` (field ``line``,
without its line break). A failed tuple is emitted again after ``retry_delay_ms``.
"""
from __future__ import annotations

import heapq
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stormpy.api.component import Spout

log = logging.getLogger(__name__)

LOCK_DIR = ".lock"


def _default_reader(line: str) -> list[Any]:
    return [line]


class DirectorySpout(Spout):
    """``DirectorySpout("/data/incoming", pattern="*.log").spec(par=2)``; see the module doc."""

    def __init__(self, directory: str | os.PathLike[str], pattern: str = "*", reader: Any = None,
                 done_dir: str | os.PathLike[str] | None = None, bad_dir: str | os.PathLike[str] | None = None,
                 encoding: str = "utf-8", lock_timeout_secs: float = 30.0, progress_every_secs: float = 1.0,
                 retry_delay_ms: int = 100, poll_interval_secs: float = 1.0,
                 ignore_suffixes: Sequence[str] = (".tmp", ".COPYING")) -> None:
        if reader is None:
            self.parse: Callable[[str], list[Any] | None] = _default_reader
            fields: tuple[str, ...] = ("line",)
        elif isinstance(reader, tuple) and len(reader) == 2 and callable(reader[0]):
            self.parse, fields = reader[0], tuple(reader[1])
        else:
            raise TypeError(f"DirectorySpout: reader must be a (function, fields) pair, given {reader!r}")
        if lock_timeout_secs <= 0:
            raise ValueError(f"DirectorySpout: lock_timeout_secs must be positive, given {lock_timeout_secs!r}")
        self.directory = Path(directory)
        self.pattern = pattern
        self.done_dir = Path(done_dir) if done_dir else self.directory / "done"
        self.bad_dir = Path(bad_dir) if bad_dir else self.directory / "bad"
        self.encoding = encoding
        self.lock_timeout = float(lock_timeout_secs)
        self.progress_every = float(progress_every_secs)
        self.retry_delay = retry_delay_ms / 1000.0
        self.poll_interval = float(poll_interval_secs)
        self.ignore_suffixes = tuple(ignore_suffixes)
        self.outputs = list(fields)

    @property
    def spec(self) -> Any:  # type: ignore[override]
        """Declare this spout in a Topology class (its outputs are the reader's fields)."""
        from stormpy.api.dsl import instance_spec

        return instance_spec(self)

    # ------------------------------------------------------------ lifecycle
    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        if not self.directory.is_dir():
            raise FileNotFoundError(f"DirectorySpout: {self.directory} is not a directory")
        self.lock_dir = self.directory / LOCK_DIR
        for d in (self.lock_dir, self.done_dir, self.bad_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.owner = f"{getattr(context, 'topology_id', '')}:{getattr(context, 'task_id', 0)}:{uuid.uuid4().hex[:8]}"
        self.current: Path | None = None
        self.handle: Any = None
        self.next_scan = 0.0
        self._reset_file_state()

    def _reset_file_state(self) -> None:
        self.line_no = 0                         # next line to read
        self.offsets: dict[int, int] = {}        # line number -> byte offset of lines read, not acked
        self.in_flight: dict[tuple[str, int], list[Any]] = {}
        self.retries: list[tuple[float, tuple[str, int]]] = []
        self.eof = False
        self.end_offset = 0
        self.last_touch = 0.0
        self.last_saved = 0.0
        self.last_progress: tuple[int, int] | None = None

    def close(self) -> None:
        if self.current is not None:
            self._save_progress(force=True)
            if self.handle is not None:
                self.handle.close()
            # the lock stays: a lock is released only with a finished file (or by its timeout),
            # so the un-acked lines of this file are re-read by whoever takes it
            self.current = None

    # ------------------------------------------------------------ files and locks
    def _lock_path(self, name: str) -> Path:
        return self.lock_dir / f"{name}.lock"

    def _progress_path(self, name: str) -> Path:
        return self.lock_dir / f"{name}.progress"

    def _candidates(self) -> list[Path]:
        return sorted(p for p in self.directory.glob(self.pattern)
                      if p.is_file() and not p.name.endswith(self.ignore_suffixes) and not p.name.startswith("."))

    def _try_lock(self, path: Path) -> bool:
        lock = self._lock_path(path.name)
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:
                return False   # released just now; next scan
            if age < self.lock_timeout:
                return False
            # a dead owner's lock: take it over (rename is atomic, one taker wins)
            stale = lock.with_name(f"{lock.name}.{uuid.uuid4().hex[:8]}.stale")
            try:
                os.rename(lock, stale)
            except FileNotFoundError:
                return False
            log.warning("DirectorySpout: lock of %s untouched for %.0f s: taking the file over", path.name, age)
            stale.unlink(missing_ok=True)
            return self._try_lock(path)
        with os.fdopen(fd, "w") as f:
            f.write(self.owner)
        return True

    def _open_next(self) -> bool:
        for path in self._candidates():
            if not self._try_lock(path):
                continue
            if not path.exists():   # finished by someone between listing and locking
                self._lock_path(path.name).unlink(missing_ok=True)
                continue
            self._reset_file_state()
            self.current = path
            self.handle = open(path, "rb")
            progress = self._progress_path(path.name)
            if progress.exists():
                saved = json.loads(progress.read_text())
                self.handle.seek(saved["offset"])
                self.line_no = saved["line"]
                self.last_progress = (saved["offset"], saved["line"])
                log.info("DirectorySpout: resuming %s at line %d", path.name, self.line_no)
            self.last_touch = time.monotonic()
            return True
        return False

    def _touch(self) -> None:
        now = time.monotonic()
        if self.current is not None and now - self.last_touch >= min(self.lock_timeout / 3, 5.0):
            os.utime(self._lock_path(self.current.name))
            self.last_touch = now
            self._save_progress()

    def _commit_point(self) -> tuple[int, int]:
        if self.offsets:
            line = min(self.offsets)
            return self.offsets[line], line
        return self.handle.tell(), self.line_no

    def _save_progress(self, force: bool = False) -> None:
        if self.current is None or self.handle is None:
            return
        point = self._commit_point()
        if point == self.last_progress:
            return
        target = self._progress_path(self.current.name)
        tmp = target.with_name(target.name + f".{uuid.uuid4().hex[:6]}.new")
        tmp.write_text(json.dumps({"offset": point[0], "line": point[1], "owner": self.owner}))
        os.replace(tmp, target)
        self.last_progress = point

    def _finish(self, to_dir: Path, reason: str | None = None) -> None:
        assert self.current is not None
        path = self.current
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        target = to_dir / path.name
        if target.exists():
            target = to_dir / f"{path.name}.{int(time.time())}"
        os.replace(path, target)
        self._progress_path(path.name).unlink(missing_ok=True)
        self._lock_path(path.name).unlink(missing_ok=True)
        if reason:
            text = f"DirectorySpout: {path.name} moved to {to_dir}: {reason}"
            log.error("%s", text)
            self.report_error(text)
        else:
            log.info("DirectorySpout: %s done (%d lines)", path.name, self.line_no)
        self.current = None
        self._reset_file_state()

    # ------------------------------------------------------------ emitting
    def next_tuple(self) -> None:
        now = time.monotonic()
        if self.retries and self.retries[0][0] <= now:
            _, key = heapq.heappop(self.retries)
            values = self.in_flight.get(key)
            if values is not None:
                self.emit(values, tup_id=key)
            return
        if self.current is None:
            if now < self.next_scan:
                # No sleep here: a next_tuple that emits nothing makes the executor wait
                # (``topology.sleep.spout.wait.strategy.time.ms``), and in an executor loop a sleep
                # would hold up every other executor of the process (5 ms per idle step, it was).
                return
            if not self._open_next():
                self.next_scan = now + self.poll_interval
                return
        self._touch()
        if self.eof:
            if not self.offsets:
                self._finish(self.done_dir)
            return
        offset = self.handle.tell()
        raw = self.handle.readline()
        if not raw:
            self.eof = True
            return
        line_no = self.line_no
        try:
            text = raw.decode(self.encoding).rstrip("\r\n")
            values = self.parse(text)
        except Exception as exc:
            self._finish(self.bad_dir, f"line {line_no + 1}: {type(exc).__name__}: {exc}")
            return
        self.line_no += 1
        if values is None:
            return   # the reader skipped it: nothing waits for it
        key = (self.current.name, line_no)
        self.offsets[line_no] = offset
        self.in_flight[key] = values
        self.emit(values, tup_id=key)

    def ack(self, tup_id: Any) -> None:
        if self.in_flight.pop(tup_id, None) is None or self.current is None or tup_id[0] != self.current.name:
            return
        self.offsets.pop(tup_id[1], None)
        now = time.monotonic()
        if now - self.last_saved >= self.progress_every:
            self.last_saved = now
            self._save_progress()

    def fail(self, tup_id: Any) -> None:
        if tup_id in self.in_flight:
            heapq.heappush(self.retries, (time.monotonic() + self.retry_delay, tup_id))
