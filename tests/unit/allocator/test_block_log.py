from __future__ import annotations

from pathlib import Path

import pytest

from allocator.block_log import (
    DEFAULT_FIRST_ID,
    MAX_EPOCH_ADVANCE,
    RECORD_BYTES,
    BlockLog,
    BlockLogFailed,
    ClaimsWentBack,
    ProducerIdBlock,
    ProducerIdsExhausted,
    StaleBrokerEpoch,
)
from tests.unit.allocator.test_durable import FullDisk


def test_blocks_of_1000_from_2_pow_48_and_never_again_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "blocks.log"
    with BlockLog(path) as log:
        assert log.allocate(1, 5) == ProducerIdBlock(DEFAULT_FIRST_ID, 1000)
        assert log.allocate(2, 1) == ProducerIdBlock(DEFAULT_FIRST_ID + 1000, 1000)
    assert path.stat().st_size == 2 * RECORD_BYTES
    with BlockLog(path) as reopened:
        assert reopened.allocate(1, 5).first_id == DEFAULT_FIRST_ID + 2000
        assert reopened.broker_epoch(1) == 5 and reopened.broker_epoch(2) == 1


def test_an_older_epoch_of_a_broker_is_stale_even_after_a_restart(tmp_path: Path) -> None:
    with BlockLog(tmp_path / "blocks.log") as log:
        log.allocate(7, 10)
        log.allocate(7, 11)  # a newer epoch wins
        with pytest.raises(StaleBrokerEpoch):
            log.allocate(7, 10)
    with BlockLog(tmp_path / "blocks.log") as reopened, pytest.raises(StaleBrokerEpoch):
        reopened.allocate(7, 10)


@pytest.mark.parametrize("damage", ["torn", "corrupt"])
def test_a_damaged_tail_never_leads_to_a_block_handed_out_twice(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "blocks.log"
    with BlockLog(path, first_id=0) as log:
        answered = [log.allocate(1, 1) for _ in range(3)]
    data = bytearray(path.read_bytes())
    if damage == "torn":
        data += data[-RECORD_BYTES:][:RECORD_BYTES // 2]  # half of a fourth record: never answered
    else:
        data[-3] ^= 0xFF  # the last (answered) record fails its checksum
    path.write_bytes(bytes(data))
    with BlockLog(path, first_id=0) as recovered:
        expected = (RECORD_BYTES // 2, 0) if damage == "torn" else (0, 1)
        assert (recovered.torn_bytes, recovered.corrupt_records) == expected
        fresh = recovered.allocate(1, 1)
    assert all(fresh.first_id > block.last_id for block in answered)
    assert path.stat().st_size % RECORD_BYTES == 0


def test_exhaustion_and_bad_id_spaces(tmp_path: Path) -> None:
    with BlockLog(tmp_path / "blocks.log", first_id=0, end_id=2500) as log:
        log.allocate(1, 1)
        log.allocate(1, 1)
        with pytest.raises(ProducerIdsExhausted):
            log.allocate(1, 1)
    with pytest.raises(ValueError):
        BlockLog(tmp_path / "other.log", first_id=10, end_id=10)


def test_an_epoch_far_above_the_last_is_refused_and_not_stored(tmp_path: Path) -> None:
    with BlockLog(tmp_path / "blocks.log") as log:
        with pytest.raises(StaleBrokerEpoch, match="not a registration"):
            log.allocate(3, (1 << 63) - 1)  # would have locked broker 3 out for ever
        with pytest.raises(StaleBrokerEpoch):
            log.allocate(3, -1)
        assert log.broker_epoch(3) is None
        log.allocate(3, 1)
        log.allocate(3, 1 + MAX_EPOCH_ADVANCE)  # a proxy restarted that often still gets its blocks
        with pytest.raises(StaleBrokerEpoch):
            log.allocate(3, 2 + 2 * MAX_EPOCH_ADVANCE)
    with BlockLog(tmp_path / "blocks.log") as reopened:
        assert reopened.broker_epoch(3) == 1 + MAX_EPOCH_ADVANCE


def test_a_full_disk_hands_out_nothing_and_allocation_resumes_with_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "blocks.log"
    with BlockLog(path, first_id=0) as log:
        first = log.allocate(1, 1)
        disk = FullDisk(monkeypatch, room=RECORD_BYTES // 2)
        for _ in range(2):
            with pytest.raises(BlockLogFailed):
                log.allocate(1, 1)
        assert path.stat().st_size == RECORD_BYTES  # no half record left behind
        disk.room = 10 * RECORD_BYTES
        second = log.allocate(1, 1)
    assert second.first_id == first.last_id + 1
    with BlockLog(path, first_id=0) as reopened:
        assert (reopened.torn_bytes, reopened.corrupt_records) == (0, 0)
        assert reopened.allocate(1, 1).first_id == second.last_id + 1


def test_claimed_blocks_are_recorded_with_gaps_and_never_below_one_recorded(tmp_path: Path) -> None:
    path = tmp_path / "blocks.log"
    with BlockLog(path) as log:
        assert log.record_claimed(DEFAULT_FIRST_ID + 5000, 0, 1) == ProducerIdBlock(DEFAULT_FIRST_ID + 5000, 1000)
        with pytest.raises(ClaimsWentBack):  # a recreated topic's offsets start again
            log.record_claimed(DEFAULT_FIRST_ID, 0, 1)
    with BlockLog(path) as reopened:
        with pytest.raises(ClaimsWentBack):
            reopened.record_claimed(DEFAULT_FIRST_ID + 5000, 0, 1)
        assert reopened.record_claimed(DEFAULT_FIRST_ID + 9000, 0, 2).first_id == DEFAULT_FIRST_ID + 9000
