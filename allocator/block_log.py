"""Producer-ID blocks (KIP-730) from a durable, append-only log.

Each allocation appends one fixed-size record (next producer id, broker id, broker epoch, time,
CRC-32) and fsyncs it before the block is handed out, as Kafka's controller writes a
``ProducerIdsRecord`` before answering. Recovery truncates a record cut short at the tail, skips
a block for every whole record that fails its checksum after the last good one (it may have been
answered), and continues after the last durable end, so no ID is ever handed out twice. The
highest epoch each broker id has used is rebuilt from the same records.

A failed append (full disk, I/O error) hands out nothing and leaves no part of its record in the
file; the next allocation tries again, so allocation resumes by itself once the disk does.

Broker epochs are checked the way Kafka's controller checks them against a broker's registration
(``ClusterControlManager.checkBrokerEpoch``, STALE_BROKER_EPOCH): the registration the log knows
is the highest epoch a broker id has allocated with; an older epoch is a fenced incarnation, and an
epoch more than ``MAX_EPOCH_ADVANCE`` above it is no incarnation of that broker (a proxy adds one
per start) and is refused without being stored, so no request can lock a broker id out for ever.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import NamedTuple

from allocator.durable import AppendOnlyFile, fsync_directory

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000
DEFAULT_FIRST_ID = 1 << 48
"""Proxy-issued IDs start far above the cluster's own (which start at 0), so they never collide."""
MAX_PRODUCER_ID = (1 << 63) - 1
MAX_EPOCH_ADVANCE = 1_000_000
"""How far above the last epoch a broker id used (0 for a new one) a new epoch may be."""

_RECORD = struct.Struct(">qiqq")  # next producer id, broker id, broker epoch, time ms
_CRC = struct.Struct(">I")
RECORD_BYTES = _RECORD.size + _CRC.size


class ProducerIdBlock(NamedTuple):
    first_id: int
    size: int

    @property
    def last_id(self) -> int:
        return self.first_id + self.size - 1


class StaleBrokerEpoch(Exception):
    """The broker id has already allocated with a newer epoch."""


class ProducerIdsExhausted(Exception):
    """The ID space has no room for another block."""


class ClaimsWentBack(Exception):
    """A block claimed elsewhere lies below one recorded before: handing it out would repeat IDs."""


class BlockLogFailed(Exception):
    """A write or fsync failed: nothing was handed out and the file holds no part of the record."""


def encode_record(next_id: int, broker_id: int, broker_epoch: int, time_ms: int) -> bytes:
    payload = _RECORD.pack(next_id, broker_id, broker_epoch, time_ms)
    return payload + _CRC.pack(zlib.crc32(payload))


class BlockLog:
    """Thread-safe: allocations may run on executor threads so the fsync never blocks an event loop."""

    def __init__(self, path: Path, first_id: int = DEFAULT_FIRST_ID, end_id: int = MAX_PRODUCER_ID + 1,
                 block_size: int = BLOCK_SIZE) -> None:
        if not 0 <= first_id < end_id <= MAX_PRODUCER_ID + 1:
            raise ValueError(f"the ID space [{first_id}, {end_id}) is empty or outside 0..2^63-1")
        self.path = path
        self._end_id = end_id
        self._block_size = block_size
        self._lock = threading.Lock()
        self._epochs: dict[int, int] = {}
        self.next_id = first_id
        self.torn_bytes = 0
        """Bytes of a record cut short, dropped from the tail at recovery."""
        self.corrupt_records = 0
        """Whole records failing their checksum at recovery (kept in the file, never trusted)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = AppendOnlyFile(path, self._recover())

    def _recover(self) -> int:
        """Rebuild the next ID and the epochs; return where the whole records end."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._create()
            return 0
        whole = len(data) - len(data) % RECORD_BYTES
        corrupt_since_last_valid = 0
        for position in range(0, whole, RECORD_BYTES):
            payload = data[position:position + _RECORD.size]
            (crc,) = _CRC.unpack_from(data, position + _RECORD.size)
            if zlib.crc32(payload) != crc:
                self.corrupt_records += 1
                corrupt_since_last_valid += 1
                continue
            next_id, broker_id, epoch, _ = _RECORD.unpack(payload)
            self.next_id = max(self.next_id, next_id)
            self._epochs[broker_id] = max(epoch, self._epochs.get(broker_id, epoch))
            corrupt_since_last_valid = 0
        # a whole record that fails its checksum was written and fsynced, so its block may have been
        # handed out: assume it was, and skip one block for each such record after the last good one
        self.next_id += corrupt_since_last_valid * self._block_size
        if self.corrupt_records:
            log.error("%s: %d records fail their checksum; skipped %d blocks to be safe", self.path,
                      self.corrupt_records, corrupt_since_last_valid)
        self.torn_bytes = len(data) - whole
        if self.torn_bytes:
            log.warning("%s: dropping %d bytes of a record cut short", self.path, self.torn_bytes)
        return whole

    def _create(self) -> None:
        with open(self.path, "xb") as file:
            os.fsync(file.fileno())
        fsync_directory(self.path.parent)  # the new file's name is durable too

    def broker_epoch(self, broker_id: int) -> int | None:
        return self._epochs.get(broker_id)

    def allocate(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        """The next block, durable on disk before it is returned."""
        with self._lock:
            return self._append(self.next_id, broker_id, broker_epoch)

    def record_claimed(self, first_id: int, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        """A block claimed elsewhere (``pid_source = "cluster"``), durable here before it is used."""
        with self._lock:
            if first_id < self.next_id:
                raise ClaimsWentBack(f"block {first_id} is below {self.next_id}, where the blocks already "
                                     f"recorded in {self.path} end")
            return self._append(first_id, broker_id, broker_epoch)

    def _append(self, first: int, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        known = self._epochs.get(broker_id)
        if known is not None and broker_epoch < known:
            raise StaleBrokerEpoch(f"broker {broker_id} epoch {broker_epoch} is older than {known}")
        if not 0 <= broker_epoch <= (known or 0) + MAX_EPOCH_ADVANCE:
            raise StaleBrokerEpoch(f"broker {broker_id} epoch {broker_epoch} is not a registration of it "
                                   f"(last epoch {known}; at most {MAX_EPOCH_ADVANCE} above it)")
        if first + self._block_size > self._end_id:
            raise ProducerIdsExhausted(f"no block of {self._block_size} left below {self._end_id}")
        next_id = first + self._block_size
        try:
            self._file.append(encode_record(next_id, broker_id, broker_epoch, int(time.time() * 1000)), sync=True)
        except OSError as error:
            raise BlockLogFailed(f"{self.path}: cannot append: {error}") from error
        self.next_id = next_id
        self._epochs[broker_id] = broker_epoch
        return ProducerIdBlock(first, self._block_size)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> BlockLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
