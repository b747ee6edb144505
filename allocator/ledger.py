"""The PID ledger: every producer ID the proxy issued or saw, on disk, with bounded memory.

Layout under its directory (the project's own design, Kafka has no such ledger; docs/producer-ids.md):
- ``active-<seq>.log``: the append-only segment, one CRC-checked record per update (an update of
  a known PID appends a newer version). Written with ``os.write`` on each update, so it survives
  the process being killed; ``flush`` makes it durable (fsync) by sealing it.
- ``snapshot-<seq>.pids``: an immutable sealed segment, sorted by PID: header, a sorted index of
  (pid, offset) read by binary search with ``pread``, then the records, each with its CRC.
- ``snapshot-<seq>.bloom``: its Bloom filter (int32 bit count, int32 hash count, int64 words), then the
  CRC-32 of those bytes: a sidecar that fails it is rebuilt from its snapshot.

Memory holds the snapshots' filters (newest first), the active segment's filter and PID ->
offset map (bounded: the segment is sealed at the filter shape's capacity), and a bounded
write-through LRU cache. ``read`` tries the cache, the active segment, a segment being sealed,
then each snapshot whose filter matches, newest first. Sealing starts a new active segment, writes
the old one's snapshot and filter (fsynced, renamed into place; this part may run on a worker
thread), and only then drops the old segment, so a known PID is never unreadable. Recovery after
a kill: temporary files are removed, a segment already sealed is dropped, a seal under way is
finished, and the active segment's records are read up to the first torn or corrupt one and the
file is truncated there.

Faults: an append that fails (full disk, I/O error) leaves no part of its records in the segment
(``AppendOnlyFile``) and raises; the caller keeps the records and tries again. A seal whose
snapshot cannot be written keeps the segment readable and is finished by the next ``flush``.

Bounds: a record stores at most ``MAX_CLIENT_ID_BYTES`` of the client id (a client id may be 32 KiB,
and a request may carry hundreds of PIDs); ``expire_snapshots`` deletes snapshots sealed before a
cut-off (every PID in one was last seen before it was sealed; a PID seen since has a newer record).

The Bloom filter implementation is injected (``FilterFactory``): the proxy passes the quota
engines' MurmurHash3 filter, whose byte layout is the sidecar format.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple, Protocol

from allocator.durable import TEMPORARY_SUFFIX, AppendOnlyFile, write_durably

log = logging.getLogger(__name__)

_RECORD_HEAD = struct.Struct(">qhqqHH")  # pid, epoch, first seen ms, last seen ms, user len, client len
_CRC = struct.Struct(">I")
_SNAPSHOT_HEAD = struct.Struct(">4sIqI")  # magic, record count, data offset, CRC of head + index
_INDEX_ENTRY = struct.Struct(">qI")  # pid, offset of its record in the data section
_MAGIC = b"PIDS"
_SNAPSHOT = re.compile(r"snapshot-(\d{10})\.pids")
_ACTIVE = re.compile(r"active-(\d{10})\.log")
MAX_CLIENT_ID_BYTES = 64
"""A record keeps this much of the client id: enough to tell clients apart in a report."""


class PidRecord(NamedTuple):
    pid: int
    user: str
    client_id: str
    epoch: int
    first_seen_ms: int
    last_seen_ms: int


class Filter(Protocol):
    def add(self, item: int) -> None: ...
    def __contains__(self, item: int) -> bool: ...
    def to_bytes(self) -> bytes: ...


class FilterFactory(Protocol):
    def new(self) -> Filter: ...
    def load(self, data: bytes) -> Filter: ...


class LedgerCorrupt(Exception):
    pass


def bounded_client_id(client_id: str) -> str:
    """The client id as a record stores it: its first ``MAX_CLIENT_ID_BYTES`` bytes, cut between characters."""
    encoded = client_id.encode()
    if len(encoded) <= MAX_CLIENT_ID_BYTES:
        return client_id
    return encoded[:MAX_CLIENT_ID_BYTES].decode(errors="ignore")


def encode_record(record: PidRecord) -> bytes:
    user, client = record.user.encode(), bounded_client_id(record.client_id).encode()
    body = _RECORD_HEAD.pack(record.pid, record.epoch, record.first_seen_ms, record.last_seen_ms,
                             len(user), len(client)) + user + client
    return body + _CRC.pack(zlib.crc32(body))


def decode_record(data: bytes | memoryview, offset: int) -> tuple[PidRecord, int] | None:
    """The record at ``offset`` and the offset after it, or None when torn or corrupt."""
    if offset + _RECORD_HEAD.size > len(data):
        return None
    pid, epoch, first, last, user_length, client_length = _RECORD_HEAD.unpack_from(data, offset)
    end = offset + _RECORD_HEAD.size + user_length + client_length
    if end + _CRC.size > len(data) or zlib.crc32(data[offset:end]) != _CRC.unpack_from(data, end)[0]:
        return None
    strings = bytes(data[offset + _RECORD_HEAD.size:end])
    try:
        user, client = strings[:user_length].decode(), strings[user_length:].decode()
    except UnicodeDecodeError:
        return None
    return PidRecord(pid, user, client, epoch, first, last), end + _CRC.size


def read_record_at(fd: int, path: Path, position: int) -> PidRecord:
    """The record at ``position`` of an open segment or snapshot file (two ``pread`` calls)."""
    head = os.pread(fd, _RECORD_HEAD.size, position)
    *_, user_length, client_length = _RECORD_HEAD.unpack(head)
    data = head + os.pread(fd, user_length + client_length + _CRC.size, position + _RECORD_HEAD.size)
    decoded = decode_record(data, 0)
    if decoded is None:
        raise LedgerCorrupt(f"{path}: record at {position} fails its checksum")
    return decoded[0]


def sidecar_bytes(bloom: Filter) -> bytes:
    """A ``.bloom`` sidecar: the filter's bytes, then their CRC-32."""
    data = bloom.to_bytes()
    return data + _CRC.pack(zlib.crc32(data))


def sidecar_filter_bytes(sidecar: bytes) -> bytes:
    """The filter's bytes of a ``.bloom`` sidecar; ValueError when its checksum fails."""
    data = sidecar[:-_CRC.size]
    if len(sidecar) < _CRC.size or zlib.crc32(data) != _CRC.unpack_from(sidecar, len(data))[0]:
        raise ValueError("the filter fails its checksum")
    return data


def _read_snapshot_head(fd: int, path: Path) -> tuple[int, int]:
    """A snapshot's record count and data offset, once its header and index pass their checks."""
    head = os.pread(fd, _SNAPSHOT_HEAD.size, 0)
    if len(head) != _SNAPSHOT_HEAD.size:
        raise LedgerCorrupt(f"{path}: truncated header")
    magic, count, data_offset, crc = _SNAPSHOT_HEAD.unpack(head)
    if magic != _MAGIC:
        raise LedgerCorrupt(f"{path}: not a ledger snapshot")
    # the count sizes the index read, so it is checked against the file first
    index_bytes, file_bytes = count * _INDEX_ENTRY.size, os.fstat(fd).st_size
    if data_offset != _SNAPSHOT_HEAD.size + index_bytes or data_offset > file_bytes:
        raise LedgerCorrupt(f"{path}: header declares {count} records (an index of {index_bytes} bytes) and "
                            f"data at byte {data_offset}, in a file of {file_bytes} bytes")
    if zlib.crc32(head[:-_CRC.size] + os.pread(fd, index_bytes, _SNAPSHOT_HEAD.size)) != crc:
        raise LedgerCorrupt(f"{path}: bad header or index checksum")
    return count, data_offset


class Snapshot:
    """One sealed segment: its filter in memory, everything else read from the file on demand."""

    def __init__(self, sequence: int, path: Path, bloom: Filter) -> None:
        self.sequence = sequence
        self.path = path
        self.filter = bloom
        self._fd = os.open(path, os.O_RDONLY)
        try:
            self.count, self._data_offset = _read_snapshot_head(self._fd, path)
        except LedgerCorrupt:
            os.close(self._fd)
            raise

    @staticmethod
    def encode(records: list[PidRecord]) -> bytes:
        records = sorted(records, key=lambda record: record.pid)
        data = [encode_record(record) for record in records]
        offsets = []
        position = 0
        for encoded in data:
            offsets.append(position)
            position += len(encoded)
        index = b"".join(_INDEX_ENTRY.pack(record.pid, offset) for record, offset in zip(records, offsets, strict=True))
        data_offset = _SNAPSHOT_HEAD.size + len(index)
        head = _SNAPSHOT_HEAD.pack(_MAGIC, len(records), data_offset, 0)[:-_CRC.size]
        return head + _CRC.pack(zlib.crc32(head + index)) + index + b"".join(data)

    def find(self, pid: int) -> PidRecord | None:
        low, high = 0, self.count - 1
        while low <= high:
            middle = (low + high) // 2
            entry = os.pread(self._fd, _INDEX_ENTRY.size, _SNAPSHOT_HEAD.size + middle * _INDEX_ENTRY.size)
            found, offset = _INDEX_ENTRY.unpack(entry)
            if found < pid:
                low = middle + 1
            elif found > pid:
                high = middle - 1
            else:
                return read_record_at(self._fd, self.path, self._data_offset + offset)
        return None

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        os.close(self._fd)


def read_ledger_file(path: Path) -> Iterator[PidRecord]:
    """Every record of one snapshot (``.pids``) or active segment (``.log``; a torn tail ends it).

    For readers outside the proxy (the reporting pipeline); an active segment may hold several
    versions of a PID, the last one being current.
    """
    data = path.read_bytes()
    if path.suffix != ".pids":
        position = 0
        while (decoded := decode_record(data, position)) is not None:
            record, position = decoded
            yield record
        return
    magic, count, position, _ = _SNAPSHOT_HEAD.unpack_from(data)
    if magic != _MAGIC:
        raise LedgerCorrupt(f"{path}: not a ledger snapshot")
    for _ in range(count):
        decoded = decode_record(data, position)
        if decoded is None:
            raise LedgerCorrupt(f"{path}: record at {position} fails its checksum")
        record, position = decoded
        yield record


class Segment:
    """An append-only segment: the active one, or one being sealed (read-only by then)."""

    def __init__(self, sequence: int, path: Path, bloom: Filter) -> None:
        self.sequence = sequence
        self.path = path
        self.filter = bloom
        self.offsets: dict[int, int] = {}
        """PID -> offset of its newest record."""
        self.torn_bytes = 0
        self._file = AppendOnlyFile(path, self._recover())
        self._fd = self._file.fileno()

    def _recover(self) -> int:
        """Index the records up to the first torn or corrupt one; return where they end."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        position = 0
        while (decoded := decode_record(data, position)) is not None:
            self._remember(decoded[0].pid, position)
            position = decoded[1]
        self.torn_bytes = len(data) - position
        if self.torn_bytes:
            log.warning("%s: dropping %d bytes after the last valid record", self.path, self.torn_bytes)
        return position

    def _remember(self, pid: int, offset: int) -> None:
        if pid not in self.offsets:
            self.filter.add(pid)
        self.offsets[pid] = offset

    @property
    def size(self) -> int:
        return self._file.size

    def append(self, records: list[PidRecord]) -> None:
        """Append ``records`` in one write: all of them, or (raising OSError) none."""
        encoded = [encode_record(record) for record in records]
        offset = self._file.append(b"".join(encoded))
        for record, data in zip(records, encoded, strict=True):
            self._remember(record.pid, offset)
            offset += len(data)

    def find(self, pid: int) -> PidRecord | None:
        offset = self.offsets.get(pid)
        return None if offset is None else read_record_at(self._fd, self.path, offset)

    def write_snapshot(self) -> Path:
        """Write this (no longer growing) segment's snapshot and filter durably; safe on a worker thread."""
        records = {}
        for record in read_ledger_file(self.path):
            records[record.pid] = record  # the newest version of each PID wins
        path = self.path.with_name(f"snapshot-{self.sequence:010d}.pids")
        write_durably(path.with_suffix(".bloom"), sidecar_bytes(self.filter))
        write_durably(path, Snapshot.encode(list(records.values())))
        return path

    def close(self) -> None:
        self._file.close()


class PidLedger:
    """Not thread-safe: one thread at a time (the proxy runs every call on one worker thread)."""

    def __init__(self, directory: Path, filters: FilterFactory, segment_capacity: int = 100_000,
                 cache_size: int = 100_000, seal_when_full: bool = True) -> None:
        """``seal_when_full``: ``update`` seals a full segment itself; otherwise the owner checks
        ``needs_seal`` and seals (e.g. with the snapshot written on a worker thread)."""
        self.directory = directory
        self._filters = filters
        self._segment_capacity = segment_capacity
        self._seal_when_full = seal_when_full
        self._cache: OrderedDict[int, PidRecord] = OrderedDict()
        self._cache_size = cache_size
        self.snapshots: list[Snapshot] = []
        """Newest first."""
        self._sealing: Segment | None = None
        """A segment being sealed: its snapshot is being written, or failed to be and will be retried."""
        directory.mkdir(parents=True, exist_ok=True)
        newest, unsealed = self._recover_snapshots()
        for sequence in unsealed[:-1]:  # a seal was under way (or failed) at the crash: finish it now
            self._sealing = self._segment(sequence)
            try:
                self.finish_seal(self._sealing, self._sealing.write_snapshot())
            except OSError as error:  # e.g. still no space: the segment stays readable, a flush retries
                log.error("cannot seal %s yet: %s", self._sealing.path, error)
                break
        self._active = self._segment(unsealed[-1] if unsealed else newest + 1)
        self.torn_bytes = self._active.torn_bytes

    def _segment(self, sequence: int) -> Segment:
        return Segment(sequence, self.directory / f"active-{sequence:010d}.log", self._filters.new())

    # ---- recovery ------------------------------------------------------------------------------

    def _recover_snapshots(self) -> tuple[int, list[int]]:
        """Open the snapshots; return the newest snapshot's sequence (0: none) and the sequences of
        segments not sealed yet, oldest first."""
        for leftover in self.directory.glob(f"*{TEMPORARY_SUFFIX}"):
            leftover.unlink()
        newest = 0
        for path in sorted(self.directory.iterdir()):
            match = _SNAPSHOT.fullmatch(path.name)
            if match is None:
                continue
            sequence = int(match.group(1))
            newest = max(newest, sequence)
            try:
                self.snapshots.insert(0, self._open_snapshot(sequence, path))
            except (LedgerCorrupt, OSError) as error:
                # keep going without it: its PIDs may count as new once more, nothing else is lost
                log.error("setting aside an unreadable ledger snapshot: %s", error)
                path.rename(path.with_suffix(".corrupt"))
        unsealed = []
        for sequence in sorted(int(m.group(1)) for p in self.directory.iterdir() if (m := _ACTIVE.fullmatch(p.name))):
            if sequence <= newest:  # sealed before the crash: its snapshot holds it
                (self.directory / f"active-{sequence:010d}.log").unlink()
            else:
                unsealed.append(sequence)
        return newest, unsealed

    def _open_snapshot(self, sequence: int, path: Path) -> Snapshot:
        sidecar = path.with_suffix(".bloom")
        try:
            bloom = self._filters.load(sidecar_filter_bytes(sidecar.read_bytes()))
        except (OSError, ValueError) as error:
            log.warning("%s: rebuilding the Bloom filter (%s)", sidecar, error)
            bloom = self._filters.new()
            for record in read_ledger_file(path):
                bloom.add(record.pid)
            write_durably(sidecar, sidecar_bytes(bloom))
        return Snapshot(sequence, path, bloom)

    # ---- reading and writing -----------------------------------------------------------------

    def read(self, pid: int) -> PidRecord | None:
        record = self._cache.get(pid)
        if record is not None:
            self._cache.move_to_end(pid)
            return record
        record = self._active.find(pid)
        if record is None and self._sealing is not None:
            record = self._sealing.find(pid)
        if record is None:
            for snapshot in self.snapshots:
                if pid in snapshot.filter:
                    record = snapshot.find(pid)
                    if record is not None:
                        break
        if record is not None:
            self._cache_put(record)
        return record

    def update(self, record: PidRecord) -> None:
        """Write through: the cache and the active segment."""
        self.update_many([record])

    def update_many(self, records: list[PidRecord]) -> None:
        """Write ``records`` through in one append: all of them, or (raising OSError) none."""
        self._active.append(records)
        for record in records:
            self._cache_put(record)
        if self._seal_when_full and self.needs_seal:
            self.flush()

    def _cache_put(self, record: PidRecord) -> None:
        self._cache[record.pid] = record
        self._cache.move_to_end(record.pid)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    @property
    def needs_seal(self) -> bool:
        return len(self._active.offsets) >= self._segment_capacity and self._sealing is None

    @property
    def active_records(self) -> int:
        return len(self._active.offsets)

    # ---- sealing -------------------------------------------------------------------------------

    def begin_seal(self) -> Segment | None:
        """Start a new active segment; the old one stays readable until ``finish_seal``."""
        if not self._active.offsets or self._sealing is not None:
            return None
        self._sealing = self._active
        self._active = self._segment(self._sealing.sequence + 1)
        return self._sealing

    def finish_seal(self, sealing: Segment, snapshot_path: Path) -> None:
        """The snapshot joins the index before the segment goes: a known PID is always readable."""
        self.snapshots.insert(0, Snapshot(sealing.sequence, snapshot_path, sealing.filter))
        self._sealing = None
        sealing.close()
        sealing.path.unlink()

    def flush(self) -> None:
        """Seal the active segment into a snapshot, here and now (nothing to do when it is empty).

        A seal whose snapshot could not be written is finished first; if it fails again, the error
        is raised and the segment stays readable until a later ``flush``.
        """
        if self._sealing is not None:
            self.finish_seal(self._sealing, self._sealing.write_snapshot())
        sealing = self.begin_seal()
        if sealing is not None:
            self.finish_seal(sealing, sealing.write_snapshot())

    @property
    def seal_pending(self) -> bool:
        """A seal failed and is to be retried."""
        return self._sealing is not None

    def expire_snapshots(self, sealed_before_ms: int) -> int:
        """Delete the snapshots (and their filters) sealed before ``sealed_before_ms`` (wall clock);
        return how many. Their PIDs were all last seen before then."""
        expired = [snapshot for snapshot in self.snapshots
                   if os.fstat(snapshot.fileno()).st_mtime * 1000 < sealed_before_ms]
        for snapshot in expired:
            self.snapshots.remove(snapshot)
            snapshot.close()
            snapshot.path.unlink(missing_ok=True)
            snapshot.path.with_suffix(".bloom").unlink(missing_ok=True)
        if expired:
            log.info("deleted %d ledger snapshots sealed before %d (producer-ID expiration)", len(expired),
                     sealed_before_ms)
        return len(expired)

    def close(self) -> None:
        self._active.close()
        if self._sealing is not None:
            self._sealing.close()
        for snapshot in self.snapshots:
            snapshot.close()
