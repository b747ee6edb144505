"""Usage shared by a fleet of proxies (``quota.scope = "cluster"``): what one instance charged, as a record.

Each instance collects, per quota type and bucket, what it charged since its last publication, and
the producer IDs it charged per user; the proxy publishes that as one record (or several, when
large) and every other instance adds it into its own rates and buckets. The record carries the
publisher's bucket key and limit, so a receiver can start a bucket it has not seen yet exactly as
the publisher's, and the wall-clock time of its oldest usage, so a receiver can drop usage older
than the window it would fall into. Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from quotas.config import TOPIC_TYPES, QuotaKey, QuotaType

FORMAT_VERSION = 1
USAGE_TYPES = (QuotaType.PRODUCER_BYTE_RATE, QuotaType.CONSUMER_BYTE_RATE, QuotaType.REQUEST_RATE,
               QuotaType.CONTROLLER_MUTATION_RATE)
"""Shared as amounts; producer IDs are shared as the IDs themselves (a PID is charged once per window)."""
MAX_ENTRIES_PER_RECORD = 2_000
"""Usage entries and producer IDs per record (a record stays far below a broker's 1 MB message limit)."""
MAX_PENDING_ENTRIES = 100_000
"""Buckets and producer IDs waiting for publication; beyond it (the topic unreachable for long under a
storm of new entities) new ones are counted as dropped rather than held."""


class FleetRecordError(ValueError):
    """A record on the usage topic that is not a publication of this format."""


class SharedUsage(NamedTuple):
    quota_type: QuotaType
    key: QuotaKey
    amount: float
    limit: float


class SharedProducerIds(NamedTuple):
    user: str
    limit: float
    producer_ids: tuple[int, ...]


@dataclass(frozen=True)
class Publication:
    instance: str
    oldest_ms: int
    """Wall-clock time of the oldest usage it carries."""
    usage: tuple[SharedUsage, ...] = ()
    producer_ids: tuple[SharedProducerIds, ...] = ()

    @property
    def entries(self) -> int:
        """Usage entries and producer IDs: what MAX_ENTRIES_PER_RECORD and MAX_PENDING_ENTRIES count."""
        return len(self.usage) + sum(len(shared.producer_ids) for shared in self.producer_ids)

    def encode(self) -> bytes:
        return json.dumps({
            "v": FORMAT_VERSION, "instance": self.instance, "oldest_ms": self.oldest_ms,
            "usage": [[str(u.quota_type), u.key.user, u.key.client_id, u.amount, u.limit, *_topic_of(u.key)]
                      for u in self.usage],
            "pids": [[p.user, p.limit, list(p.producer_ids)] for p in self.producer_ids],
        }, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> Publication:
        try:
            document = json.loads(value)
            if document["v"] != FORMAT_VERSION:
                raise FleetRecordError(f"format version {document['v']}, this proxy reads {FORMAT_VERSION}")
            usage = tuple(SharedUsage(QuotaType(kind), QuotaKey(str(user), str(client), topic=str(_one(topic))),
                                      float(amount), float(limit))
                          for kind, user, client, amount, limit, *topic in document["usage"])
            pids = tuple(SharedProducerIds(str(user), float(limit), tuple(int(pid) for pid in ids))
                         for user, limit, ids in document["pids"])
            publication = cls(str(document["instance"]), int(document["oldest_ms"]), usage, pids)
        except FleetRecordError:
            raise
        except (ValueError, KeyError, TypeError) as error:
            raise FleetRecordError(f"not a usage publication: {type(error).__name__}: {error}") from None
        for entry in usage:
            _check_usage(entry)
        for shared in pids:
            if not _positive(shared.limit) or any(pid < 0 for pid in shared.producer_ids):
                raise FleetRecordError(f"producer ids of {shared.user!r}: a limit that is not a positive number "
                                       "or a negative producer id")
        return publication


def _topic_of(key: QuotaKey) -> list[str]:
    """A topic quota's bucket names its topic as a sixth element; the other buckets have five."""
    return [key.topic] if key.topic else []


def _one(topic: list[object]) -> object:
    if len(topic) > 1:
        raise FleetRecordError(f"a usage entry has {5 + len(topic)} elements, not 5 or 6")
    return topic[0] if topic else ""


def _positive(number: float) -> bool:
    return math.isfinite(number) and number > 0


def _check_usage(entry: SharedUsage) -> None:
    """Every number another member sends is checked before it is added: an infinite or NaN amount would stop
    a rate from ever being measured again, and a negative byte amount would lower a rate (a quota bypass).
    Only a mutation bucket takes negative amounts: the tokens a member gave back for a failed creation."""
    if entry.quota_type not in USAGE_TYPES:
        raise FleetRecordError(f"usage of type {entry.quota_type} is not shared this way")
    if entry.key.topic and entry.quota_type not in TOPIC_TYPES:
        raise FleetRecordError(f"usage of {entry.key}: a topic's bucket of type {entry.quota_type}")
    if not _positive(entry.limit) or not math.isfinite(entry.amount):
        raise FleetRecordError(f"usage of {entry.key}: limit {entry.limit}, amount {entry.amount}")
    if entry.amount < 0 and entry.quota_type is not QuotaType.CONTROLLER_MUTATION_RATE:
        raise FleetRecordError(f"usage of {entry.key}: a negative amount {entry.amount} of {entry.quota_type}")


@dataclass
class UsageShare:
    """What this instance charged since its last publication, merged per bucket.

    A bucket charged ``limit x urgent_after_s`` or more since the last publication (this proxy alone
    used up the whole budget of a publish interval) calls ``on_urgent``: the others would otherwise
    learn it a whole interval late, while the budget is contended, which lets the fleet overshoot by
    what each member admits in that time.
    """

    urgent_after_s: float = 0.0
    on_urgent: Callable[[], None] | None = None

    usage: dict[tuple[QuotaType, QuotaKey], list[float]] = field(default_factory=dict)
    """(type, key) -> [amount, limit]."""
    producer_ids: dict[str, tuple[float, list[int]]] = field(default_factory=dict)
    """user -> (limit, new producer ids)."""
    dropped: int = 0
    """Entries not kept because MAX_PENDING_ENTRIES were waiting."""
    _pending_pids: int = field(default=0, init=False)

    def charged(self, quota_type: QuotaType, key: QuotaKey, amount: float, limit: float) -> None:
        entry = self.usage.get((quota_type, key))
        if entry is None:
            if len(self.usage) + self._pending_pids >= MAX_PENDING_ENTRIES:
                self.dropped += 1
                return
            entry = self.usage[(quota_type, key)] = [amount, limit]
        else:
            entry[0] += amount
            entry[1] = limit
        self._check_urgent(entry[0], limit)

    def _check_urgent(self, amount: float, limit: float) -> None:
        if self.on_urgent is not None and amount >= limit * self.urgent_after_s:
            self.on_urgent()

    def producer_ids_charged(self, user: str, producer_ids: tuple[int, ...], limit: float) -> None:
        room = MAX_PENDING_ENTRIES - len(self.usage) - self._pending_pids
        kept = producer_ids[:max(room, 0)]
        self.dropped += len(producer_ids) - len(kept)
        if not kept:
            return
        entry = self.producer_ids.get(user)
        pids = entry[1] if entry is not None else []
        pids.extend(kept)
        self.producer_ids[user] = (limit, pids)
        self._pending_pids += len(kept)
        self._check_urgent(len(pids), limit)

    def __bool__(self) -> bool:
        return bool(self.usage or self.producer_ids)

    def take(self, instance: str, oldest_ms: int) -> list[Publication]:
        """Everything pending, as publications of at most MAX_ENTRIES_PER_RECORD entries; the share empties.
        ``oldest_ms``: the wall-clock time the pending usage started (the previous take)."""
        if not self:
            return []
        usage = [SharedUsage(kind, key, amount, limit) for (kind, key), (amount, limit) in self.usage.items()
                 if amount]
        pids = [SharedProducerIds(user, limit, tuple(ids[i:i + MAX_ENTRIES_PER_RECORD]))
                for user, (limit, ids) in self.producer_ids.items()
                for i in range(0, len(ids), MAX_ENTRIES_PER_RECORD)]
        self.usage, self.producer_ids, self._pending_pids = {}, {}, 0
        return list(_chunks(instance, oldest_ms, usage, pids))


def _chunks(instance: str, oldest_ms: int, usage: list[SharedUsage],
            pids: list[SharedProducerIds]) -> Iterator[Publication]:
    while usage or pids:
        room = MAX_ENTRIES_PER_RECORD
        usage_part, usage = usage[:room], usage[room:]
        room -= len(usage_part)
        pid_part: list[SharedProducerIds] = []
        while pids and room >= len(pids[0].producer_ids):
            room -= len(pids[0].producer_ids)
            pid_part.append(pids.pop(0))
        if not usage_part and not pid_part:  # one user's chunk bigger than what is left: its own record
            pid_part.append(pids.pop(0))
        yield Publication(instance, oldest_ms, tuple(usage_part), tuple(pid_part))
