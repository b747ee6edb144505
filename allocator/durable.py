"""Durable files: whole-file replacement, whole-record appends, and failed writes counted and logged.

A write can fail half way (ENOSPC, EIO): an append that fails is cut back to the last whole record,
so a file never holds part of a record that would hide the records written after it, and the
caller may try again later (when space returns) without a restart.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

TEMPORARY_SUFFIX = ".tmp"
"""A file ending in this is an unfinished write: safe to delete at recovery."""
LOG_INTERVAL_S = 60.0
"""A store that keeps failing is logged at most this often (a full disk must not flood the log)."""


def fsync_directory(path: Path) -> None:
    """Make the names in ``path`` (created, renamed) durable."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_durably(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a temporary file, fsync it, rename it over ``path`` and fsync the directory.

    On failure the temporary file is removed (on a full disk it would hold the space it took)
    and ``path`` is as it was.
    """
    temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


class AppendOnlyFile:
    """A file of whole records, only ever appended to. An append that fails (ENOSPC, EIO, a short
    write, a failed fsync) is cut back to the last whole record; if even that fails, the next append
    cuts back first. Not thread-safe: one writer."""

    def __init__(self, path: Path, size: int | None = None) -> None:
        """``size``: where the whole records end (recovery read them); the file is cut there. By
        default the file's current size."""
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size if size is None else size
        self._torn = size is not None and size != os.fstat(self._fd).st_size

    def fileno(self) -> int:
        return self._fd

    def append(self, data: bytes, sync: bool = False) -> int:
        """Append ``data`` (whole records; fsynced when ``sync``) and return the offset it starts at."""
        try:
            if self._torn:
                self._cut_back()
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(data)} bytes)")
            if sync:
                os.fsync(self._fd)
        except OSError:
            self._torn = True
            with contextlib.suppress(OSError):
                self._cut_back()
            raise
        offset = self.size
        self.size += len(data)
        return offset

    def _cut_back(self) -> None:
        os.ftruncate(self._fd, self.size)
        os.fsync(self._fd)
        self._torn = False

    def close(self) -> None:
        os.close(self._fd)


class WriteErrors:
    """Failed writes of the durable stores: counted per store (exported as a metric), logged at most
    once a minute per store, and the return to health logged once. Thread-safe: stores write on
    worker threads."""

    def __init__(self, stores: tuple[str, ...] = (), clock: Callable[[], float] = time.monotonic) -> None:
        """``stores``: counted from 0, so each has a series before its first failure."""
        self._clock = clock
        self._lock = threading.Lock()
        self.counts: dict[str, int] = dict.fromkeys(stores, 0)
        self._failing: dict[str, float] = {}
        """Store -> when its failure was last logged; present while it fails."""
        self._unlogged: dict[str, int] = {}

    def failed(self, store: str, error: BaseException) -> None:
        now = self._clock()
        with self._lock:
            self.counts[store] = self.counts.get(store, 0) + 1
            last_logged = self._failing.get(store)
            if last_logged is not None and now - last_logged < LOG_INTERVAL_S:
                self._unlogged[store] = self._unlogged.get(store, 0) + 1
                return
            self._failing[store] = now
            repeated = self._unlogged.pop(store, 0)
        log.error("cannot write the %s: %s%s", store, error,
                  f" ({repeated} more failures since the last report)" if repeated else "")

    def succeeded(self, store: str) -> None:
        if store not in self._failing:  # the usual case: no lock taken
            return
        with self._lock:
            if self._failing.pop(store, None) is None:
                return
            self._unlogged.pop(store, None)
        log.warning("writing the %s again", store)

    def failing(self, store: str) -> bool:
        return store in self._failing


LOCK_FILE = "lock"


class DirectoryLocked(Exception):
    """Another process owns the state directory."""


def lock_directory(directory: Path) -> int:
    """Take the exclusive lock of ``directory`` (``flock`` on its lock file, which names the owner's
    pid) and return the descriptor holding it: the lock lasts until it is closed or the process
    ends, however it ends. Raises DirectoryLocked when another process holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(descriptor)
        raise DirectoryLocked(f"{directory} is in use by another process (pid {owner}); "
                              "each proxy needs its own --state-dir") from None
    with contextlib.suppress(OSError):  # the name is for the message above; a full disk must not stop a start
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return descriptor
