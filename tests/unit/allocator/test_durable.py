from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from allocator import durable
from allocator.durable import AppendOnlyFile, DirectoryLocked, WriteErrors, lock_directory, write_durably


class FullDisk:
    """``os.write`` as on a disk that fills up: writes what fits, then refuses (ENOSPC)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, room: int) -> None:
        self.room = room
        self._write = os.write
        monkeypatch.setattr(durable.os, "write", self)

    def __call__(self, descriptor: int, data: bytes) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        written = self._write(descriptor, bytes(data)[:self.room])
        self.room -= written
        return written


def test_a_short_write_is_cut_back_to_the_last_whole_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "records"
    file = AppendOnlyFile(path)
    assert file.append(b"first|") == 0
    disk = FullDisk(monkeypatch, room=3)
    with pytest.raises(OSError, match="short write"):
        file.append(b"second|")
    assert path.read_bytes() == b"first|"  # not b"first|sec"
    with pytest.raises(OSError, match="No space"):
        file.append(b"second|")
    disk.room = 100  # space is back
    assert file.append(b"third|") == 6
    file.close()
    assert path.read_bytes() == b"first|third|"


def test_an_append_after_recovery_cuts_the_torn_tail_first(tmp_path: Path) -> None:
    path = tmp_path / "records"
    path.write_bytes(b"whole|torn")
    file = AppendOnlyFile(path, size=6)  # recovery found the whole records end at 6
    file.append(b"next|")
    file.close()
    assert path.read_bytes() == b"whole|next|"


def test_a_failed_whole_file_write_leaves_the_old_file_and_no_temporary(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.json"
    write_durably(path, b"old")

    def refuse(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(durable.os, "fsync", refuse)
    with pytest.raises(OSError):
        write_durably(path, b"new")
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_failures_are_counted_always_and_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    errors = WriteErrors(("ledger",), clock=lambda: now[0])
    assert errors.counts == {"ledger": 0}
    with caplog.at_level(logging.WARNING, logger="allocator.durable"):
        for second in range(120):
            now[0] = float(second)
            errors.failed("ledger", OSError(errno.ENOSPC, "No space left on device"))
        errors.succeeded("ledger")
        errors.succeeded("ledger")
    assert errors.counts == {"ledger": 120} and not errors.failing("ledger")
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3, messages
    assert "59 more failures" in messages[1] and messages[2] == "writing the ledger again"


def test_a_state_directory_has_one_owner(tmp_path: Path) -> None:
    held = lock_directory(tmp_path / "state")
    assert (tmp_path / "state" / "lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(DirectoryLocked, match=f"in use by another process \\(pid {os.getpid()}\\)"):
        lock_directory(tmp_path / "state")  # flock: another open of the file conflicts, even in one process
    os.close(held)
    os.close(lock_directory(tmp_path / "state"))  # released with its descriptor
