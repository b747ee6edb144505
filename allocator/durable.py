"""Writing a whole file so that, after a crash, it is either the old file or the new one, on disk."""

from __future__ import annotations

import os
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"
"""A file ending in this is an unfinished write: safe to delete at recovery."""


def fsync_directory(path: Path) -> None:
    """Make the names in ``path`` (created, renamed) durable."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_durably(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a temporary file, fsync it, rename it over ``path`` and fsync the directory."""
    temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    fsync_directory(path.parent)
