from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from allocator.ledger import MAX_CLIENT_ID_BYTES, PidLedger, PidRecord, encode_record
from quotas.bloom import BloomFilter
from tests.unit.allocator.test_durable import FullDisk


class Filters:
    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity

    def new(self) -> BloomFilter:
        return BloomFilter.for_capacity(self.capacity, 0.01)

    def load(self, data: bytes) -> BloomFilter:
        return BloomFilter.from_bytes(data)


def record(pid: int, last_seen_ms: int = 2000, user: str = "alice") -> PidRecord:
    return PidRecord(pid, user, f"client-{pid % 7}", pid % 3, 1000, last_seen_ms)


def test_read_after_update_and_after_flush(tmp_path: Path) -> None:
    ledger = PidLedger(tmp_path, Filters(), cache_size=10)
    for pid in range(100):
        ledger.update(record(pid))
    ledger.update(record(5, last_seen_ms=9000))  # a newer version of a known PID
    assert ledger.read(5) == record(5, 9000)
    ledger.flush()
    assert ledger.active_records == 0 and len(ledger.snapshots) == 1
    reopened = PidLedger(tmp_path, Filters(), cache_size=10)  # nothing cached: read from the snapshot
    assert [reopened.read(pid) for pid in (0, 5, 99)] == [record(0), record(5, 9000), record(99)]
    assert reopened.read(100) is None
    ledger.close()
    reopened.close()


def test_lookups_across_100_snapshot_files(tmp_path: Path) -> None:
    ledger = PidLedger(tmp_path, Filters(capacity=50), segment_capacity=50, cache_size=1)
    for pid in range(5000):
        ledger.update(record(pid * 7919, user=f"u{pid % 5}"))  # sealed every 50 PIDs
    assert len(ledger.snapshots) == 100
    ledger.close()
    reopened = PidLedger(tmp_path, Filters(capacity=50), segment_capacity=50, cache_size=1)
    assert len(reopened.snapshots) == 100
    for pid in range(0, 5000, 37):
        assert reopened.read(pid * 7919) == record(pid * 7919, user=f"u{pid % 5}")
    assert all(reopened.read(pid * 7919 + 1) is None for pid in range(0, 5000, 37))
    reopened.close()


def test_recovery_drops_a_torn_tail_and_an_active_segment_already_sealed(tmp_path: Path) -> None:
    ledger = PidLedger(tmp_path, Filters())
    for pid in range(10):
        ledger.update(record(pid))
    ledger.close()  # no flush: the records are only in the active segment
    active = next(tmp_path.glob("active-*.log"))
    torn = b"\x00\x00\x00\x00\x00\x00\x00\x0b partial"  # a record cut short by the kill
    with active.open("ab") as file:
        file.write(torn)
    recovered = PidLedger(tmp_path, Filters())
    assert recovered.torn_bytes == len(torn)
    assert [recovered.read(pid) for pid in range(10)] == [record(pid) for pid in range(10)]
    recovered.update(record(10))
    recovered.flush()
    recovered.close()
    # a crash after segment 1 was sealed into its snapshot but before the segment was removed
    (tmp_path / "active-0000000001.log").write_bytes(encode_record(record(99)))
    again = PidLedger(tmp_path, Filters())
    assert not (tmp_path / "active-0000000001.log").exists()
    assert again.read(10) == record(10) and again.read(99) is None and again.active_records == 0
    again.close()


def test_missing_sidecar_is_rebuilt_and_a_corrupt_snapshot_set_aside(tmp_path: Path) -> None:
    ledger = PidLedger(tmp_path, Filters(capacity=10), segment_capacity=10)
    for pid in range(20):
        ledger.update(record(pid))
    ledger.close()
    first, second = sorted(tmp_path.glob("snapshot-*.pids"))
    first.with_suffix(".bloom").unlink()
    data = bytearray(second.read_bytes())
    data[30] ^= 0xFF  # inside the index: the header checksum fails
    second.write_bytes(bytes(data))
    recovered = PidLedger(tmp_path, Filters(capacity=10), segment_capacity=10)
    assert first.with_suffix(".bloom").exists()
    assert second.with_suffix(".corrupt").exists()
    assert [recovered.read(pid) is not None for pid in (0, 9, 10)] == [True, True, False]
    recovered.close()


def test_a_sidecar_failing_its_checksum_is_rebuilt_and_a_snapshot_count_beyond_its_file_set_aside(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ledger = PidLedger(tmp_path, Filters(capacity=10), segment_capacity=10)
    for pid in range(20):
        ledger.update(record(pid))
    ledger.close()
    first, second = sorted(tmp_path.glob("snapshot-*.pids"))
    sidecar = bytearray(first.with_suffix(".bloom").read_bytes())
    sidecar[20] ^= 0xFF  # a bit of the filter: the pid it drops would read as unknown
    first.with_suffix(".bloom").write_bytes(bytes(sidecar))
    data = bytearray(second.read_bytes())
    data[4:8] = (2**32 - 1).to_bytes(4, "big")  # a count whose index (48 GiB) the file cannot hold
    second.write_bytes(bytes(data))
    recovered = PidLedger(tmp_path, Filters(capacity=10), segment_capacity=10)
    assert f"{first.with_suffix('.bloom')}: rebuilding the Bloom filter (the filter fails its checksum)" in caplog.text
    assert f"{second}: header declares 4294967295 records" in caplog.text
    assert second.with_suffix(".corrupt").exists()
    assert all(recovered.read(pid) == record(pid) for pid in range(10))
    recovered.close()


_WRITER = """
import sys
from pathlib import Path
from allocator.ledger import PidLedger, PidRecord, encode_record
from tests.unit.allocator.test_ledger import Filters, record
ledger = PidLedger(Path(sys.argv[1]), Filters(capacity=300), segment_capacity=300)
pid = 0
while True:
    ledger.update(record(pid))
    pid += 1
    if pid % 50 == 0:
        print(pid, flush=True)
"""


@pytest.mark.parametrize("attempt", range(5))
def test_every_acknowledged_update_survives_kill_9(tmp_path: Path, attempt: int) -> None:
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[3])
    assert writer.stdout is not None
    acknowledged = 0
    for line in writer.stdout:
        acknowledged = int(line)
        if acknowledged >= 400 + 250 * attempt:  # kills land before, at and after seals
            break
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    writer.stdout.close()
    recovered = PidLedger(tmp_path, Filters(capacity=300), segment_capacity=300)
    assert all(recovered.read(pid) == record(pid) for pid in range(acknowledged))
    recovered.close()


def test_sealing_on_a_worker_thread_keeps_every_pid_readable(tmp_path: Path) -> None:
    ledger = PidLedger(tmp_path, Filters(), segment_capacity=10, cache_size=1, seal_when_full=False)
    for pid in range(10):
        ledger.update(record(pid))
    assert ledger.needs_seal
    sealing = ledger.begin_seal()
    assert sealing is not None and not ledger.needs_seal
    ledger.update(record(10))  # goes to the new active segment
    with ThreadPoolExecutor(1) as worker:
        snapshot = worker.submit(sealing.write_snapshot)
        assert all(ledger.read(pid) == record(pid) for pid in range(11))  # meanwhile: from the sealing segment
        ledger.finish_seal(sealing, snapshot.result())
    assert len(ledger.snapshots) == 1 and ledger.active_records == 1
    assert all(ledger.read(pid) == record(pid) for pid in range(11))
    ledger.close()


def test_a_seal_cut_short_by_a_crash_is_finished_at_recovery(tmp_path: Path) -> None:
    ledger = PidLedger(tmp_path, Filters(), seal_when_full=False)
    for pid in range(5):
        ledger.update(record(pid))
    assert ledger.begin_seal() is not None
    ledger.update(record(5))
    ledger.close()  # "killed" before the snapshot was written: two active segments on disk
    assert len(list(tmp_path.glob("active-*.log"))) == 2
    recovered = PidLedger(tmp_path, Filters())
    assert len(recovered.snapshots) == 1 and recovered.active_records == 1
    assert all(recovered.read(pid) == record(pid) for pid in range(6))
    recovered.close()


def test_records_written_after_a_full_disk_are_readable_and_survive_recovery(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = PidLedger(tmp_path, Filters(), cache_size=1)
    ledger.update(record(1))
    disk = FullDisk(monkeypatch, room=10)  # part of the next record fits
    with pytest.raises(OSError):
        ledger.update_many([record(2), record(3)])
    disk.room = 1 << 20  # space is back
    ledger.update(record(4))
    assert [ledger.read(pid) for pid in (1, 2, 3, 4)] == [record(1), None, None, record(4)]
    ledger.close()
    recovered = PidLedger(tmp_path, Filters(), cache_size=1)
    assert recovered.torn_bytes == 0
    assert [recovered.read(pid) for pid in (1, 4)] == [record(1), record(4)]
    recovered.close()


def test_a_failed_seal_keeps_its_pids_readable_and_is_finished_by_the_next_flush(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = PidLedger(tmp_path, Filters(), segment_capacity=10, cache_size=1, seal_when_full=False)
    ledger.update_many([record(pid) for pid in range(10)])
    with monkeypatch.context() as failing:
        def refuse(descriptor: int) -> None:
            raise OSError(errno.EIO, "Input/output error")
        failing.setattr(os, "fsync", refuse)  # the snapshot cannot be made durable
        with pytest.raises(OSError):
            ledger.flush()
        assert ledger.seal_pending and not list(tmp_path.glob("*.tmp"))
    ledger.update(record(10))
    assert all(ledger.read(pid) == record(pid) for pid in range(11))
    ledger.flush()  # the failed seal first, then the segment written since
    assert not ledger.seal_pending and len(ledger.snapshots) == 2 and ledger.active_records == 0
    assert all(ledger.read(pid) == record(pid) for pid in range(11))
    ledger.close()


def test_a_record_keeps_a_bounded_client_id(tmp_path: Path) -> None:
    ledger = PidLedger(tmp_path, Filters(), cache_size=1)
    huge = "é" * 16_000  # 32,000 bytes
    ledger.update_many([PidRecord(pid, "alice", huge, 0, 1, 1) for pid in range(300)])
    assert ledger.read(7) == PidRecord(7, "alice", "é" * (MAX_CLIENT_ID_BYTES // 2), 0, 1, 1)
    assert next(tmp_path.glob("active-*.log")).stat().st_size < 300 * 150
    ledger.close()


def test_snapshots_sealed_before_the_expiration_are_deleted_with_their_filters(tmp_path: Path) -> None:
    ledger = PidLedger(tmp_path, Filters(), cache_size=1)
    ledger.update(record(1))
    ledger.flush()
    ledger.update(record(2))
    ledger.flush()
    old, new = sorted(tmp_path.glob("snapshot-*.pids"))
    os.utime(old, (1_000, 1_000))  # sealed at 1,000 s
    assert ledger.expire_snapshots(sealed_before_ms=2_000_000) == 1
    left = sorted(path.name for path in tmp_path.iterdir() if path.suffix != ".log")
    assert left == [new.with_suffix(".bloom").name, new.name]
    assert ledger.read(1) is None and ledger.read(2) == record(2)
    ledger.close()
