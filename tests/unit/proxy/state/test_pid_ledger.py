from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from allocator.durable import WriteErrors
from allocator.ledger import PidLedger, PidRecord
from proxy.state import pid_ledger
from proxy.state.pid_ledger import STORE, LedgerRecorder, open_ledger
from tests.unit.allocator.test_durable import FullDisk


def recorder(state_dir: Path, errors: WriteErrors | None = None) -> LedgerRecorder:
    return LedgerRecorder(open_ledger(state_dir, 1000), errors or WriteErrors((STORE,)), 100)


async def settled(ledger: LedgerRecorder, timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while ledger.unwritten_records:
            await asyncio.sleep(0.01)


def test_pids_are_read_and_written_on_the_worker_thread_and_answered_from_memory(tmp_path: Path) -> None:
    threads: set[str] = set()
    read = PidLedger.read

    def spying_read(self: PidLedger, pid: int) -> PidRecord | None:
        threads.add(threading.current_thread().name)
        return read(self, pid)

    async def scenario() -> None:
        first = recorder(tmp_path)
        first.seen([1, 2], "alice", "app")
        await settled(first)
        first.close()
        second = recorder(tmp_path)  # a restart: the cache is empty
        assert second.needs_lookup([1, 2, 3]) == [1, 2, 3]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(PidLedger, "read", spying_read)
            await second.look_up([1, 2, 3])
        assert second.needs_lookup([1, 2, 3]) == []  # 3 is known to be absent
        seen = second.seen_within(60_000)
        assert [seen(pid) for pid in (1, 2, 3)] == [True, True, False]
        second.close()

    asyncio.run(scenario())
    assert threads and all(name.startswith("pid-ledger") for name in threads)


def test_a_full_disk_keeps_records_in_memory_and_writing_resumes_with_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pid_ledger, "RETRY_FIRST_S", 0.05)
    errors = WriteErrors((STORE,))

    async def scenario() -> None:
        ledger = recorder(tmp_path, errors)
        disk = FullDisk(monkeypatch, room=0)
        ledger.seen([1, 2, 3], "alice", "a" * 40_000)
        async with asyncio.timeout(30):
            while errors.counts[STORE] < 2:  # retried with back-off
                await asyncio.sleep(0.01)
        assert ledger.unwritten_records == 3 and errors.failing(STORE)
        assert ledger.seen_within(60_000)(2)  # the quota goes on from memory
        disk.room = 1 << 20
        await settled(ledger)
        assert not errors.failing(STORE)
        ledger.close()

    asyncio.run(scenario())
    monkeypatch.undo()
    reopened = PidLedger(tmp_path / "pid-ledger", pid_ledger.LedgerFilters(1000), 1000)
    assert [reopened.read(pid).client_id for pid in (1, 2, 3)] == ["a" * 64] * 3  # type: ignore[union-attr]
    assert reopened.torn_bytes == 0
    reopened.close()


def test_a_failed_seal_is_retried_with_backoff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pid_ledger, "RETRY_FIRST_S", 0.05)
    errors = WriteErrors((STORE,))
    attempts = []
    flush = PidLedger.flush

    def failing_twice(self: PidLedger) -> None:
        attempts.append(1)
        if len(attempts) <= 2:
            raise OSError(28, "No space left on device")
        flush(self)

    monkeypatch.setattr(PidLedger, "flush", failing_twice)

    async def scenario() -> None:
        ledger = recorder(tmp_path, errors)
        ledger.seen([1], "alice", "app")
        await settled(ledger)
        upkeep = asyncio.get_running_loop().create_task(ledger.maintain(0.01, 86_400_000, 0.01))
        async with asyncio.timeout(30):
            # the third attempt counts itself as it starts, on the worker thread: wait for its outcome too
            while len(attempts) < 3 or errors.failing(STORE):
                await asyncio.sleep(0.01)
        upkeep.cancel()
        assert errors.counts[STORE] == 2 and not errors.failing(STORE)
        ledger.close()

    asyncio.run(scenario())
    assert list((tmp_path / "pid-ledger").glob("snapshot-*.pids"))


def test_seals_with_nothing_to_write_do_not_call_a_full_disk_healthy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A seal goes through on a full disk when the segment holds nothing new (the writes failed): the store is
    still failing until the records waiting are written, so the once-a-minute log of the failure is not reset."""
    monkeypatch.setattr(pid_ledger, "RETRY_FIRST_S", 0.05)
    errors = WriteErrors((STORE,))

    async def scenario() -> None:
        ledger = recorder(tmp_path, errors)
        upkeep = asyncio.get_running_loop().create_task(ledger.maintain(0.01, 86_400_000, 0.01))
        disk = FullDisk(monkeypatch, room=0)
        ledger.seen([1, 2, 3], "alice", "app")
        async with asyncio.timeout(30):
            while errors.counts[STORE] < 3:  # retried with back-off, sealed meanwhile at every check
                assert errors.failing(STORE) or errors.counts[STORE] == 0
                await asyncio.sleep(0.01)
        assert "writing the pid-ledger again" not in caplog.text
        disk.room = 1 << 20
        await settled(ledger)
        async with asyncio.timeout(30):
            while errors.failing(STORE):  # the next write or seal
                await asyncio.sleep(0.01)
        upkeep.cancel()
        ledger.close()

    with caplog.at_level("WARNING"):
        asyncio.run(scenario())
    assert caplog.text.count("cannot write the pid-ledger") == 1, caplog.text  # once a minute, not at each retry
    assert caplog.text.count("writing the pid-ledger again") == 1
