"""The usage log through the cluster (``[usage] topic``, a fleet's default): every line the usage log appends to its
hourly files is appended to a topic of the cluster too, keyed by the member that wrote it, so that a fleet's whole
usage is in one place, and outlives the disk of a member that dies.

The files stay the record. The shipper reads them on from its position (``<state-dir>/usage/shipped``: the file and
the byte offset of the first line the cluster has not acknowledged), sends whole lines as one idempotent batch with
acks=all, and moves its position on, durably, once the cluster has acknowledged them. While the cluster cannot take
them the lines wait in the files, which keep them for ``usage-retention-days``, and go out oldest first when it can; a
file deleted before its lines went out is counted (``..._usage_topic_files_lost_total``) and logged. A batch not
acknowledged is sent again as it was (the cluster stores it once); a proxy stopped between an acknowledgement and the
write of its position sends those lines again after its restart, each record carrying where its line is (the header
``usage-position``: the log's id, made once for the state directory, and ``file:offset``) so that a reader can tell
the two copies apart, whatever the member is called after the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from allocator.durable import WriteErrors, write_durably
from proxy.cluster.client import ClusterClient, ClusterError
from proxy.cluster.fleet import FleetSettings
from proxy.cluster.topic_link import RETRY_BACKOFF_S, TopicLink
from proxy.cluster.upstream import UPSTREAM_ERRORS, UpstreamAccess
from proxy.settings.config import ConfigError, ProxyConfig
from proxy.settings.definitions import Table, TableKey
from quotas.usage_record import POSITION_HEADER, usage_file_hour

log = logging.getLogger(__name__)
_T = TypeVar("_T")

DEFAULT_FLEET_TOPIC = "__kafka_quota_proxy_usage_log"
POSITION_FILE = "shipped"
LOG_ID_FILE = "log-id"
POSITION_STORE = "usage-topic-position"
"""The position's (and the log id's) name in ``kafka_quota_proxy_state_write_errors_total``."""
SHIP_INTERVAL_S = 1.0
"""How often the files are looked at for new lines: the usage log appends a second's lines once a second."""
MAX_BATCH_BYTES = 512 * 1024
MAX_BATCH_LINES = 2000
"""Lines sent in one batch at most: with each record's own bytes (its key and header) a batch stays under the
cluster's default ``max.message.bytes``, 1 MiB."""
TOO_LARGE_ERRORS = frozenset({10, 18})
"""MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE: the topic takes smaller batches (its ``max.message.bytes``)."""
FINAL_SHIP_TIMEOUT_S = 5.0
"""At shutdown, how long the last lines may take to go out (the rest go at the next start)."""

USAGE_TABLE = Table("usage", "the usage log through the cluster, for a fleet's report made in one place", (
    TableKey("topic", "the topic every usage line is appended to as well, keyed by the member; \"\" for none",
             derived=f"{DEFAULT_FLEET_TOPIC} with a [fleet] table, none without"),
))
"""``[usage]``'s keys, for the settings reference and the check of what the table holds."""


@dataclass(frozen=True)
class UsageTopicSettings:
    """``[usage]`` of the --config file."""

    topic: str

    @classmethod
    def from_config(cls, config: ProxyConfig) -> UsageTopicSettings | None:
        """None when no usage topic applies: no ``[usage] topic``, and no ``[fleet]`` (or ``topic = ""``)."""
        table = config.extra.get("usage", {})
        if not isinstance(table, dict):
            raise ConfigError("[usage]: must be a table")
        USAGE_TABLE.refuse_unknown(table)
        topic = table.get("topic", DEFAULT_FLEET_TOPIC if "fleet" in config.extra else "")
        if not isinstance(topic, str) or len(topic) > 249:  # the cluster judges the rest (the log says so)
            raise ConfigError(f"[usage] topic: a topic name of at most 249 characters, got {topic!r}")
        fleet = FleetSettings.from_config(config)
        if fleet is not None and topic in fleet.own_topics:
            raise ConfigError(f"[usage] topic: {topic} is a topic of the [fleet] already; the usage log needs its own")
        return cls(topic) if topic else None


@dataclass(frozen=True)
class Position:
    """Where the first line not yet acknowledged starts: a usage file and a byte offset in it."""

    file: str
    offset: int

    def text(self) -> str:
        return f"{self.file}:{self.offset}"


@dataclass(frozen=True)
class Batch:
    """Lines sent together, where each starts, and where the last ends."""

    lines: list[bytes]
    positions: list[Position]
    end: Position


class UsageShipper(Collector):
    def __init__(self, directory: Path, client: ClusterClient, member: str, retention_days: float,
                 registry: CollectorRegistry, write_errors: WriteErrors | None = None) -> None:
        """``directory``: the usage log's; ``member``: this proxy's name in the fleet (each record's key);
        ``write_errors``: where a position that cannot be written is counted (``POSITION_STORE``)."""
        self._directory = directory
        self._client = client
        self._member = member.encode()
        self._retention_ms = round(retention_days * 86_400_000)
        self._errors = write_errors or WriteErrors()
        self._position_path = directory / POSITION_FILE
        self._position = self._read_position()
        self._position_written = True
        self._at_file_end = False
        """The last read found no whole line after the position in its file."""
        self._log_id = self._read_log_id()
        self._link = TopicLink("usage log", "append to", client.topic, "its lines wait in the usage files")
        self._task: asyncio.Task[None] | None = None
        self._topic_ready = False
        self._unacknowledged: Batch | None = None
        self._batch_bytes = MAX_BATCH_BYTES
        """Lines read for one batch at most: less once the topic refused a batch as too large."""
        self._files_lock = threading.Lock()
        self.lines_sent = 0
        self.files_lost = 0
        self.lines_too_long = 0
        self.unsent_bytes = 0
        """What the usage files held after the position when last measured (``measure_unsent``)."""
        registry.register(self)

    @property
    def topic(self) -> str:
        return self._client.topic

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._ship_forever())
        log.info("usage log: appending to topic %s as %s", self._client.topic, self._member.decode())

    async def stop(self) -> None:
        """Once the usage log has written its last second: what the cluster takes within a moment goes out."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        with contextlib.suppress(TimeoutError, *UPSTREAM_ERRORS):
            async with asyncio.timeout(FINAL_SHIP_TIMEOUT_S):
                await self._ensure_topic()
                while await self.ship():
                    pass
        self._client.close()

    async def _ship_forever(self) -> None:
        while True:
            try:
                await self._ensure_topic()
                more = await self.ship()
            except UPSTREAM_ERRORS as error:
                self._link.failed(error)
                more = False
            except Exception:  # a defect: said, and the lines wait in the files (the loop must not end silently)
                log.exception("usage log: appending to %s failed", self._client.topic)
                more = False
            else:
                self._link.succeeded()
            await asyncio.to_thread(self._locked, self.measure_unsent)
            if not more:
                await asyncio.sleep(SHIP_INTERVAL_S if self._link.up else RETRY_BACKOFF_S)

    async def _ensure_topic(self) -> None:
        if not self._topic_ready:
            await self._client.ensure({"retention.ms": str(self._retention_ms), "cleanup.policy": "delete"})
            self._topic_ready = True

    async def ship(self) -> bool:
        """Send the next batch of lines not yet acknowledged (raises what the cluster answered); whether one went
        out (more may wait). A batch that failed is sent again as it was, whatever was written since: the cluster
        stores an idempotent batch it was sent twice once. One the topic refuses as too large is sent in halves."""
        # the files are read, and the position written (fsync), off the event loop: it never waits for the disk
        batch = self._unacknowledged or await asyncio.to_thread(self._locked, self._next_batch)
        if batch is None:
            return False
        self._unacknowledged = batch
        headers = [[(POSITION_HEADER, f"{self._log_id}/{position.text()}".encode())] for position in batch.positions]
        try:
            await self._client.produce(batch.lines, idempotent=True, keys=[self._member] * len(batch.lines),
                                       headers=headers)
        except ClusterError as error:
            if error.error_code not in TOO_LARGE_ERRORS or len(batch.lines) == 1:
                raise  # one line the topic refuses waits, as every line while the topic cannot take them
            self._send_in_halves(batch)
            return True
        self._unacknowledged = None
        self.lines_sent += len(batch.lines)
        self._batch_bytes = min(MAX_BATCH_BYTES, 2 * self._batch_bytes)
        await asyncio.to_thread(self._locked, self._move_to, batch.end)
        return True

    def _send_in_halves(self, batch: Batch) -> None:
        """A batch the topic refused as too large (its ``max.message.bytes``): its first half is sent next (the
        cluster stored none of it), and the batches after it no larger, until one is taken."""
        half = len(batch.lines) // 2
        self._unacknowledged = Batch(batch.lines[:half], batch.positions[:half], batch.positions[half])
        self._batch_bytes = max(1, sum(map(len, batch.lines[:half])) + half)

    def _locked(self, step: Callable[..., _T], *arguments: object) -> _T:
        """``step`` alone on the files and the position: a thread of a task cancelled at shutdown may still run."""
        with self._files_lock:
            return step(*arguments)

    def _next_batch(self) -> Batch | None:
        """The whole lines after the position (up to ``MAX_BATCH_BYTES`` and ``MAX_BATCH_LINES``); None when every
        line written is acknowledged. Files deleted before they were sent are passed over, and so is a line too long
        to send."""
        while True:
            files = self._files()
            position = self._position
            if position is None:
                if not files:
                    return None
                self._move_to(Position(files[0], 0))
                continue
            later = [name for name in files if name > position.file]
            if position.file not in files:
                if not later:
                    return None  # the usage log has not written its file yet
                if not self._at_file_end:  # it expired (usage-retention-days) before all its lines went out
                    self._lost(position.file, later[0])
                self._move_to(Position(later[0], 0))
                continue
            whole = self._whole_lines(position)
            if whole is None:
                continue
            self._at_file_end = not whole
            if whole:
                lines = whole.split(b"\n")[:-1][:MAX_BATCH_LINES]
                positions = []
                offset = position.offset
                for line in lines:
                    positions.append(Position(position.file, offset))
                    offset += len(line) + 1
                return Batch(lines, positions, Position(position.file, offset))
            if not later:
                return None  # the newest file: its next lines are still to come
            self._move_to(Position(later[0], 0))  # a file is done once the next hour's has begun (a torn end left)

    def _whole_lines(self, position: Position) -> bytes | None:
        """The whole lines after ``position`` in its file, as many as a batch takes (b"" for none); None when the
        position moved instead (the file cut back, a line too long passed over) or the file is gone since it was
        listed."""
        try:
            with open(self._directory / position.file, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size < position.offset:  # the writer cut a failed append back: those lines come again, from here
                    self._move_to(Position(position.file, size))
                    return None
                file.seek(position.offset)
                data = file.read(self._batch_bytes)
                whole = data[:data.rfind(b"\n") + 1]
                if not whole and len(data) == self._batch_bytes:
                    data += file.read(MAX_BATCH_BYTES - len(data))  # one line at least, however small the batches
                    whole = data[:data.find(b"\n") + 1]
                    if not whole and len(data) == MAX_BATCH_BYTES and self._skipped_long_line(file, position):
                        return None
                return whole
        except FileNotFoundError:
            return None

    def _skipped_long_line(self, file: BinaryIO, position: Position) -> bool:
        """A line longer than a batch (a quotas line naming a great many quotas) is not sent: counted, logged and
        passed over once it is whole. False when it is not whole (yet)."""
        while chunk := file.read(MAX_BATCH_BYTES):
            end = chunk.find(b"\n")
            if end >= 0:
                self.lines_too_long += 1
                log.warning("usage log: the line of %s at %d is longer than %d bytes: not appended to %s",
                            position.file, position.offset, MAX_BATCH_BYTES, self._client.topic)
                self._move_to(Position(position.file, file.tell() - len(chunk) + end + 1))
                return True
        return False

    def _files(self) -> list[str]:
        """The usage files, oldest first (their names sort by hour)."""
        return sorted(path.name for path in self._directory.glob("usage-*.jsonl")
                      if usage_file_hour(path.name) is not None)

    def _lost(self, gone: str, next_kept: str) -> None:
        self.files_lost += 1
        log.warning("usage log: %s was deleted (usage-retention-days) before all its lines were appended to %s; "
                    "going on from %s", gone, self._client.topic, next_kept)

    def _read_position(self) -> Position | None:
        try:
            name, _, offset = self._position_path.read_text().strip().rpartition(":")
            return Position(name, int(offset)) if usage_file_hour(name) is not None else None
        except (OSError, ValueError):
            return None  # none yet (or unreadable): every file kept is sent, from the oldest

    def _read_log_id(self) -> str:
        """This usage log's id, made at its first shipping (the directory may be a new one). One the disk does not
        take is used all the same (counted): a restart before it is written makes another."""
        path = self._directory / LOG_ID_FILE
        with contextlib.suppress(FileNotFoundError):  # another error (unreadable) stops the start: the id must stay
            log_id = path.read_text().strip()
            if log_id:
                return log_id
        log_id = uuid.uuid4().hex
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
            write_durably(path, log_id.encode())
        except OSError as error:
            self._errors.failed(POSITION_STORE, error)
        return log_id

    def _move_to(self, position: Position) -> None:
        """On from ``position``, written durably when the disk takes it (till then, a restart sends the lines from
        the last position written again: a reader knows them by their headers)."""
        self._position = position
        self._write_position()

    def _write_position(self) -> None:
        assert self._position is not None
        try:
            write_durably(self._position_path, self._position.text().encode())
        except OSError as error:
            self._position_written = False
            self._errors.failed(POSITION_STORE, error)
            return
        self._position_written = True
        self._errors.succeeded(POSITION_STORE)

    def measure_unsent(self) -> int:
        """What the usage files hold after the position (``unsent_bytes``, for the metric: measured between
        batches, off the event loop); a position the disk did not take is written again."""
        if not self._position_written:
            self._write_position()
        total = 0
        position = self._position
        for name in self._files():
            if position is None or name >= position.file:
                with contextlib.suppress(OSError):
                    size = (self._directory / name).stat().st_size
                    total += size - (position.offset if position is not None and name == position.file else 0)
        self.unsent_bytes = max(total, 0)
        return self.unsent_bytes

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("kafka_quota_proxy_usage_topic_reachable",
                                "1 while the usage log's topic takes its lines; 0: they wait in the usage files",
                                value=int(self._link.up))
        yield CounterMetricFamily("kafka_quota_proxy_usage_topic_lines_sent", "Usage-log lines the topic acknowledged",
                                  value=self.lines_sent)
        yield GaugeMetricFamily("kafka_quota_proxy_usage_topic_unsent_bytes",
                                "Bytes of the usage files not yet acknowledged by the topic", value=self.unsent_bytes)
        yield CounterMetricFamily("kafka_quota_proxy_usage_topic_failures",
                                  "Failed attempts to append to the usage log's topic", value=self._link.failures)
        yield CounterMetricFamily("kafka_quota_proxy_usage_topic_files_lost",
                                  "Usage files deleted (usage-retention-days) before all their lines were sent",
                                  value=self.files_lost)
        yield CounterMetricFamily("kafka_quota_proxy_usage_topic_lines_too_long",
                                  "Usage-log lines not sent: longer than a batch", value=self.lines_too_long)


def usage_shipper(config: ProxyConfig, member: str, access: UpstreamAccess, registry: CollectorRegistry,
                  write_errors: WriteErrors) -> UsageShipper | None:
    """The shipper ``[usage]`` asks for, or None."""
    settings = UsageTopicSettings.from_config(config)
    if settings is None:
        return None
    client = ClusterClient(config.upstream, settings.topic, access, config.connect_timeout_s, config.max_frame_bytes)
    return UsageShipper(config.state_dir / "usage", client, member, config.usage_retention_days, registry, write_errors)
