"""Noticing that a configuration file changed, by its modification time and size."""

from __future__ import annotations

import os
from pathlib import Path


class WatchedFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = self._read_stamp()

    def _read_stamp(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def changed(self) -> bool:
        """True once per change since the last call (or since it was created)."""
        stamp = self._read_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        return True
