"""The usage log: one JSON line per (user, client id) for each second with traffic (and per (user, topic) for a
topic's bytes, ``TOPIC_FIELDS``), and the quotas in force (``QUOTAS_FIELD``) when they change and atop each file.

Requests add to in-memory counters (a dict lookup and a few integer additions); once a second
the counters are swapped out and handed to a writer thread, which appends them to the hour's
file ``usage-YYYY-MM-DDTHH.jsonl`` under ``<state-dir>/usage/``. The event loop never waits for
the disk: if the writer falls behind, seconds queue up in memory (bounded, oldest dropped with
a count). This log is the input of the PySpark pipeline (``pipeline/``).

A second that cannot be written (full disk, I/O error) leaves no partial line in its file and
stays queued; each later second tries again, oldest first, so writing resumes by itself. Hourly
files older than the retention (``usage-retention-days``) are deleted as each new hour begins.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from allocator.durable import AppendOnlyFile, WriteErrors
from quotas.config import QuotaConfig
from quotas.tenants import Tenants
from quotas.usage_record import (
    BLOCK_FIELDS,
    QUOTAS_FIELD,
    TENANT_FIELD,
    TOPIC_FIELDS,
    USAGE_FIELDS,
    quota_snapshot,
    usage_file_hour,
    usage_file_name,
)

log = logging.getLogger(__name__)

(_BYTES, _PRODUCE_REQUESTS, _NEW_PIDS, _MUTATIONS, _THROTTLE_MS, _REJECTIONS, _FETCH_BYTES, _OBSERVED_THROTTLED,
 _OBSERVED_THROTTLE_MS) = range(len(USAGE_FIELDS))
_MAX_QUEUED_SECONDS = 3600
STORE = "usage-log"
"""The usage log's name in ``kafka_quota_proxy_state_write_errors_total``."""
DEFAULT_RETENTION_DAYS = 7


class UsageSecond(NamedTuple):
    epoch_s: int
    counters: dict[tuple[str, str], list[int]]
    blocks: dict[tuple[str, str, int], list[int]]
    """(user, client id, broker id) -> BLOCK_FIELDS."""
    topics: dict[tuple[str, str], list[int]]
    """(user, topic) -> TOPIC_FIELDS."""
    tenants: dict[str, str]
    """user -> the tenant it belonged to in the second, for the users of ``counters`` that belong to one."""
    quotas: str | None
    """The quotas in force, as the JSON array of a ``QUOTAS_FIELD`` line (None before they were given)."""
    quotas_changed: bool
    """They changed in this second: their line is written whichever file it goes to."""


class UsageLog:
    def __init__(self, directory: Path, retention_days: float = DEFAULT_RETENTION_DAYS,
                 write_errors: WriteErrors | None = None) -> None:
        self.directory = directory
        self._retention_s = retention_days * 86400
        self._errors = write_errors or WriteErrors()
        self._counters: dict[tuple[str, str], list[int]] = {}
        self._blocks: dict[tuple[str, str, int], list[int]] = {}
        self._topics: dict[tuple[str, str], list[int]] = {}
        self._queue: queue.Queue[UsageSecond | None] = queue.Queue(_MAX_QUEUED_SECONDS)
        self._unwritten: deque[UsageSecond] = deque()
        """Seconds the writer could not write yet (its thread only)."""
        self._current_file = ""
        self._quotas: str | None = None
        self._tenants = Tenants()
        """Of the quotas in force: whose tenant each client line's user is."""
        self._quotas_changed = False
        self._quotas_written_to = ""
        """The file the quotas in force were last written to (the writer's thread only)."""
        self.dropped_seconds = 0
        self.lines_written = 0
        self.write_errors = 0
        self._writer: threading.Thread | None = None

    def _entry(self, user: str, client_id: str) -> list[int]:
        key = (user, client_id)
        entry = self._counters.get(key)
        if entry is None:
            entry = self._counters[key] = [0] * len(USAGE_FIELDS)
        return entry

    def produce(self, user: str, client_id: str, size_bytes: int, new_pids: int, throttle_ms: int,
                rejected: bool) -> None:
        entry = self._entry(user, client_id)
        entry[_BYTES] += size_bytes
        entry[_PRODUCE_REQUESTS] += 1
        entry[_NEW_PIDS] += new_pids
        entry[_THROTTLE_MS] += throttle_ms
        entry[_REJECTIONS] += rejected

    def producer_ids(self, user: str, client_id: str, new_pids: int, throttle_ms: int) -> None:
        """Producer IDs of a request already counted by ``produce`` (checked once it was complete), or the
        throttle of an InitProducerId (``new_pids`` 0)."""
        entry = self._entry(user, client_id)
        entry[_NEW_PIDS] += new_pids
        entry[_THROTTLE_MS] += throttle_ms

    def fetch(self, user: str, client_id: str, size_bytes: int, throttle_ms: int) -> None:
        entry = self._entry(user, client_id)
        entry[_FETCH_BYTES] += size_bytes
        entry[_THROTTLE_MS] += throttle_ms

    def mutations(self, user: str, client_id: str, count: int, throttle_ms: int, rejected_topics: int) -> None:
        entry = self._entry(user, client_id)
        entry[_MUTATIONS] += count
        entry[_THROTTLE_MS] += throttle_ms
        entry[_REJECTIONS] += rejected_topics

    def observed(self, user: str, client_id: str, throttle_ms: int, refused: bool = False) -> None:
        """An observed quota let a request through that enforcement would have throttled or refused."""
        if throttle_ms > 0 or refused:
            entry = self._entry(user, client_id)
            entry[_OBSERVED_THROTTLED] += 1
            entry[_OBSERVED_THROTTLE_MS] += throttle_ms

    def topic_bytes(self, user: str, sizes: Mapping[str, int], fetched: bool) -> None:
        """Record bytes of each topic a request wrote (or a response read, ``fetched``), as a topic quota charged
        them."""
        field = 1 if fetched else 0
        for topic, size in sizes.items():
            entry = self._topics.setdefault((user, topic), [0] * len(TOPIC_FIELDS))
            entry[field] += size

    def blocks(self, user: str, client_id: str, broker_id: int, block_ids: int) -> None:
        """A producer-ID block of ``block_ids`` IDs handed out to broker ``broker_id``."""
        entry = self._blocks.setdefault((user, client_id, broker_id), [0, 0])
        entry[0] += 1
        entry[1] += block_ids

    def quotas_in_force(self, config: QuotaConfig) -> None:
        """The quotas changed (or were loaded): they are written with the second that ends next."""
        self._quotas = json.dumps(quota_snapshot(config), separators=(",", ":"))
        self._tenants = config.tenants
        self._quotas_changed = True

    # ---- the writer ---------------------------------------------------------------------------

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._writer = threading.Thread(target=self._write_loop, name="usage-log-writer", daemon=True)
        self._writer.start()

    def end_second(self, epoch_s: int) -> None:
        """Hand the counters gathered so far to the writer, stamped ``epoch_s``."""
        if not self._counters and not self._blocks and not self._topics and not self._quotas_changed:
            return
        tenants = self._tenants
        members = {user: tenant.name for user, _ in self._counters if (tenant := tenants.of_user(user)) is not None} \
            if tenants.all else {}
        second = UsageSecond(epoch_s, self._counters, self._blocks, self._topics, members, self._quotas,
                             self._quotas_changed)
        self._counters, self._blocks, self._topics = {}, {}, {}
        self._quotas_changed = False
        try:
            self._queue.put_nowait(second)
        except queue.Full:
            self.dropped_seconds += 1
            log.warning("usage log writer is behind; dropped the second %d", epoch_s)

    def stop(self, epoch_s: int) -> None:
        """Write what is left and wait for the writer (at shutdown)."""
        self.end_second(epoch_s)
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join(timeout=10)
            self._writer = None

    def _write_loop(self) -> None:
        while (second := self._queue.get()) is not None:
            self._unwritten.append(second)
            if len(self._unwritten) > _MAX_QUEUED_SECONDS:
                dropped = self._unwritten.popleft()
                self.dropped_seconds += 1
                log.warning("usage log cannot be written for an hour; dropped the second %d", dropped.epoch_s)
            self._write_unwritten()
        self._write_unwritten()

    def _write_unwritten(self) -> None:
        while self._unwritten:
            second = self._unwritten[0]
            name = usage_file_name(second.epoch_s)
            tenants = second.tenants
            lines = [json.dumps({"time": second.epoch_s, "user": user, "client_id": client_id,
                                 **({TENANT_FIELD: tenants[user]} if user in tenants else {}),
                                 **dict(zip(USAGE_FIELDS, counters, strict=True))}, separators=(",", ":"))
                     for (user, client_id), counters in second.counters.items()]
            lines += [json.dumps({"time": second.epoch_s, "user": user, "client_id": client_id, "broker_id": broker_id,
                                  **dict(zip(BLOCK_FIELDS, counters, strict=True))}, separators=(",", ":"))
                      for (user, client_id, broker_id), counters in second.blocks.items()]
            lines += [json.dumps({"time": second.epoch_s, "user": user, "topic": topic,
                                  **dict(zip(TOPIC_FIELDS, counters, strict=True))}, separators=(",", ":"))
                      for (user, topic), counters in second.topics.items()]
            with_quotas = second.quotas is not None and (second.quotas_changed or name != self._quotas_written_to)
            if with_quotas:  # first: the seconds of the file are read under them
                lines.insert(0, f'{{"time":{second.epoch_s},"{QUOTAS_FIELD}":{second.quotas}}}')
            try:
                file = AppendOnlyFile(self.directory / name)
                try:
                    file.append(("\n".join(lines) + "\n").encode())
                finally:
                    file.close()
            except OSError as error:
                self.write_errors += 1
                self._errors.failed(STORE, error)
                return
            self._errors.succeeded(STORE)
            self._unwritten.popleft()
            if with_quotas:
                self._quotas_written_to = name
            self.lines_written += len(lines)
            if name != self._current_file:
                self._current_file = name
                self.expire(second.epoch_s)

    def expire(self, now_s: float) -> None:
        """Delete the hourly files that ended more than the retention before ``now_s``."""
        for path in self.directory.glob("usage-*.jsonl"):
            hour_start = usage_file_hour(path.name)
            if hour_start is not None and hour_start + 3600 < now_s - self._retention_s:
                path.unlink(missing_ok=True)
                log.info("deleted %s (older than the usage log's retention)", path.name)
