"""The PID ledger in the request path: answers on the event loop, disk work on one worker thread.

Every PID issued here, and every PID seen in a Produce request whose batches are read, is recorded;
the producer-ID quota asks "seen before?" for PIDs its in-memory filters do not know (e.g. from
before a restart), so that such a PID is not counted as new again.

The event loop never touches the disk: a write-through cache answers for the PIDs recorded or read
lately; a request with a PID the cache does not know waits (``needs_lookup`` / ``look_up``) while the
worker thread reads the ledger. Records go to the worker in batches. A failed write (full disk, I/O
error) keeps its records in memory (bounded) and is retried with back-off, so writing resumes by
itself when the disk does; the quota goes on deciding from memory meanwhile. Sealing (fsync of a
snapshot) and the deletion of expired snapshots run on the same thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from allocator.durable import WriteErrors
from allocator.ledger import PidLedger, PidRecord, bounded_client_id
from quotas.bloom import BloomFilter

log = logging.getLogger(__name__)

STORE = "pid-ledger"
"""The ledger's name in ``kafka_quota_proxy_state_write_errors_total``."""
LEDGER_TOUCH_INTERVAL_MS = 60_000
"""A PID's last-seen time in the ledger is refreshed at most this often (a write per refresh)."""
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
MAX_UNWRITTEN_RECORDS = 1_000_000
"""Records kept in memory while the disk refuses them (about 150 bytes each); beyond, the oldest go
(their PIDs may count as new once more after a restart: nothing else is lost)."""
_DISK_CACHE_SIZE = 1000
"""The ledger's own cache, on the worker thread: the loop's cache is the one that matters."""


class LedgerFilters:
    """The ledger's Bloom filters: the quota engines' MurmurHash3 filter, 1% false positives."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity

    def new(self) -> BloomFilter:
        return BloomFilter.for_capacity(self._capacity, 0.01)

    def load(self, data: bytes) -> BloomFilter:
        return BloomFilter.from_bytes(data)


def open_ledger(state_dir: Path, segment_capacity: int) -> PidLedger:
    return PidLedger(state_dir / "pid-ledger", LedgerFilters(segment_capacity), segment_capacity, _DISK_CACHE_SIZE,
                     seal_when_full=False)


class Backoff:
    """Waits between retries of a failing disk operation: doubling from a second up to a minute."""

    def __init__(self) -> None:
        self.delay_s = 0.0

    def failed(self) -> float:
        self.delay_s = min(RETRY_MAX_S, self.delay_s * 2 or RETRY_FIRST_S)
        return self.delay_s

    def succeeded(self) -> None:
        self.delay_s = 0.0


class LedgerRecorder:
    """Records issued and seen PIDs; answers the producer-ID quota's "seen before?" from memory."""

    def __init__(self, ledger: PidLedger, errors: WriteErrors, cache_size: int,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        """``wall_ms``: ledger times are wall-clock, as they must mean the same after a restart."""
        self._ledger = ledger
        self._errors = errors
        self._cache_size = cache_size
        self._wall_ms = wall_ms
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="pid-ledger")
        self._cache: OrderedDict[int, PidRecord | None] = OrderedDict()
        """PID -> its record, or None: read from the ledger and not there."""
        self._unwritten: dict[int, PidRecord] = {}
        """Records not yet on disk, oldest first (a newer version of a PID replaces its older one)."""
        self._writing = False
        self._write_backoff = Backoff()
        self._retry: asyncio.TimerHandle | None = None
        self.dropped_records = 0
        self.lookups = 0
        """Disk lookups made for the loop (each a hop to the worker thread)."""

    # ---- answers on the loop ----------------------------------------------------------------------

    def needs_lookup(self, pids: Iterable[int]) -> list[int]:
        """The PIDs neither the cache nor the unwritten records can answer for."""
        return [pid for pid in pids if pid not in self._cache and pid not in self._unwritten]

    async def look_up(self, pids: list[int]) -> None:
        """Read ``pids`` from the ledger on the worker thread into the cache."""
        self.lookups += 1
        found = await asyncio.get_running_loop().run_in_executor(self._thread, self._read_all, pids)
        for pid in pids:
            if pid not in self._unwritten:  # recorded meanwhile: the newer answer stays
                self._cache_put(pid, found.get(pid))

    def _read_all(self, pids: list[int]) -> dict[int, PidRecord]:
        found = {}
        for pid in pids:
            record = self._ledger.read(pid)
            if record is not None:
                found[pid] = record
        return found

    def _known(self, pid: int) -> PidRecord | None:
        record = self._unwritten.get(pid)
        if record is not None:
            return record
        record = self._cache.get(pid)
        if record is not None:
            self._cache.move_to_end(pid)
        return record

    def _cache_put(self, pid: int, record: PidRecord | None) -> None:
        self._cache[pid] = record
        self._cache.move_to_end(pid)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def seen_within(self, window_ms: int) -> Callable[[int], bool]:
        """For PIDs ``needs_lookup`` was asked about (and looked up): seen less than ``window_ms`` ago?"""
        def seen_recently(pid: int) -> bool:
            known = self._known(pid)
            return known is not None and self._wall_ms() - known.last_seen_ms < window_ms
        return seen_recently

    def issued(self, pid: int, user: str, client_id: str, epoch: int) -> None:
        now = self._wall_ms()
        self._record(PidRecord(pid, user, bounded_client_id(client_id), epoch, now, now))

    def seen(self, pids: Iterable[int], user: str, client_id: str) -> None:
        """Record PIDs a Produce request carries: a new PID once, a known one at most once a minute."""
        now = self._wall_ms()
        for pid in pids:
            known = self._known(pid)
            if known is None:
                self._record(PidRecord(pid, user, bounded_client_id(client_id), 0, now, now))
            elif now - known.last_seen_ms >= LEDGER_TOUCH_INTERVAL_MS:
                self._record(known._replace(last_seen_ms=now))

    # ---- writing on the worker thread ---------------------------------------------------------------

    def _record(self, record: PidRecord) -> None:
        self._unwritten.pop(record.pid, None)
        self._unwritten[record.pid] = record
        self._cache_put(record.pid, record)
        if len(self._unwritten) > MAX_UNWRITTEN_RECORDS:
            del self._unwritten[next(iter(self._unwritten))]
            self.dropped_records += 1
        if not self._writing and self._retry is None:
            self._writing = True
            asyncio.get_running_loop().call_soon(self._write)

    def _write(self) -> None:
        batch = list(self._unwritten.values())
        future = asyncio.get_running_loop().run_in_executor(self._thread, self._ledger.update_many, batch)
        future.add_done_callback(lambda done: self._written(batch, done))

    def _written(self, batch: list[PidRecord], done: asyncio.Future[None]) -> None:
        self._writing = False
        if done.cancelled():  # the thread was shut down (close writes what is left)
            return
        error = done.exception()
        if error is not None:
            self._errors.failed(STORE, error)
            delay_s = self._write_backoff.failed()
            self._retry = asyncio.get_running_loop().call_later(delay_s, self._retry_write)
            return
        self._errors.succeeded(STORE)
        self._write_backoff.succeeded()
        for record in batch:
            if self._unwritten.get(record.pid) is record:  # not replaced by a newer version meanwhile
                del self._unwritten[record.pid]
        if self._unwritten:
            self._writing = True
            self._write()

    def _retry_write(self) -> None:
        self._retry = None
        if self._unwritten and not self._writing:
            self._writing = True
            self._write()

    @property
    def unwritten_records(self) -> int:
        return len(self._unwritten)

    # ---- upkeep -----------------------------------------------------------------------------------

    async def seal(self) -> None:
        """Seal the active segment (fsync a snapshot) on the worker thread; raises OSError on failure."""
        await asyncio.get_running_loop().run_in_executor(self._thread, self._ledger.flush)

    async def expire(self, sealed_before_ms: int) -> int:
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self._ledger.expire_snapshots, sealed_before_ms)

    def needs_seal(self) -> bool:
        ledger = self._ledger
        return ledger.needs_seal or ledger.seal_pending

    async def maintain(self, seal_interval_s: float, expiration_ms: int, check_interval_s: float) -> None:
        """Seal when the segment is full or the interval has passed (a failed seal is retried with
        back-off), and delete snapshots older than the producer-ID expiration."""
        backoff = Backoff()
        last_seal = time.monotonic()
        next_attempt = 0.0
        while True:
            await asyncio.sleep(check_interval_s)
            now = time.monotonic()
            if now < next_attempt or not (self.needs_seal() or now - last_seal >= seal_interval_s):
                continue
            try:
                await self.seal()
                await self.expire(self._wall_ms() - expiration_ms)
            except OSError as error:
                self._errors.failed(STORE, error)
                next_attempt = now + backoff.failed()
                continue
            # a seal with nothing new goes through on a disk the writes still fail on: while records wait, their
            # write says when the store is healthy again
            if not self._unwritten:
                self._errors.succeeded(STORE)
            backoff.succeeded()
            last_seal = now

    def close(self) -> None:
        """Write what is left (at shutdown) and stop the worker thread."""
        if self._retry is not None:
            self._retry.cancel()
        self._thread.shutdown(wait=True)  # a batch being written finishes first
        if self._unwritten:
            try:
                self._ledger.update_many(list(self._unwritten.values()))
            except OSError as error:
                log.error("%d PID ledger records not written at shutdown: %s", len(self._unwritten), error)
        self._ledger.close()
