"""Usage shared by a fleet of proxies (``quota.scope = "cluster"``): what one instance charged, as a record.

Each instance collects, per quota type and bucket, what it charged since its last publication, and
the producer IDs it charged per user; the proxy publishes that as one record (or several, when
large) and every other instance adds it into its own rates and buckets. The record carries the
publisher's bucket key and limit, so a receiver can start a bucket it has not seen yet exactly as
the publisher's, and the wall-clock time of its oldest usage, so a receiver can drop usage older
than the window it would fall into. Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from quotas.config import TENANT_TYPES, TOPIC_TYPES, QuotaKey, QuotaType
from quotas.quota_types import QUOTA_TYPES, FleetSharing, types_shared

FORMAT_VERSION = 1
USAGE_TYPES = types_shared(FleetSharing.AMOUNTS, FleetSharing.AMOUNTS_HELD)
"""Shared as amounts; producer IDs are shared as the IDs themselves (a PID is charged once per window)."""
MAX_ENTRIES_PER_RECORD = 2_000
"""Usage entries and producer IDs per record (a record stays far below a broker's 1 MB message limit)."""
MAX_PENDING_ENTRIES = 100_000
"""Buckets and producer IDs waiting for publication; beyond it (the topic unreachable for long under a
storm of new entities) new ones are counted as dropped rather than held."""


class Holder(enum.IntEnum):
    """Whose bucket a usage entry is, told by its length: a principal's (five elements), a topic's (a sixth, its
    topic) or a tenant's (a seventh, its tenant, the topic empty)."""

    PRINCIPAL = 5
    TOPIC = 6
    TENANT = 7


HeldUsers = Callable[[QuotaType, Holder], Container[str] | None]
"""The users (of a tenant's buckets, the tenants) of the buckets of a quota type a reader keeps, whose usage by the
others it adds (``Publication.decode``); None: it keeps them all."""


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
            "usage": [[str(u.quota_type), u.key.user, u.key.client_id, u.amount, u.limit, *_bucket_of(u.key)]
                      for u in self.usage],
            "pids": [[p.user, p.limit, list(p.producer_ids)] for p in self.producer_ids],
        }, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes, held: HeldUsers | None = None) -> Publication:
        """``held``: the users whose buckets the reader keeps; the usage of the others is left out, unchecked
        (``None``: every entry is kept)."""
        try:
            document = json.loads(value)
            if document["v"] != FORMAT_VERSION:
                raise FleetRecordError(f"format version {document['v']}, this proxy reads {FORMAT_VERSION}")
            usage = _usage_entries(document["usage"], held)
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


def _bucket_of(key: QuotaKey) -> list[str]:
    """A topic quota's bucket names its topic as a sixth element, a tenant's its tenant as a seventh (``Holder``)."""
    if key.tenant:
        return ["", key.tenant]
    return [key.topic] if key.topic else []


_QUOTA_TYPES = {str(quota_type): quota_type for quota_type in QuotaType}
"""Looked up by name: ``QuotaType(name)`` per entry was a large share of the decoding of a member reading a fleet of a
hundred (docs/benchmarks.md)."""


def _usage_entries(entries: list[list[object]], held: HeldUsers | None) -> tuple[SharedUsage, ...]:
    # a member of a fleet of a hundred reads 100,000 entries a second, most of them of buckets it does not keep:
    # those are passed over on their user, before anything is made of them
    users = None if held is None else {
        name: {holder: held(quota_type, holder) for holder in Holder}
        for name, quota_type in _QUOTA_TYPES.items()}
    usage = []
    for entry in entries:
        topic: object = ""
        tenant: object = ""
        if len(entry) == Holder.PRINCIPAL:
            kind, user, client, amount, limit = entry
        elif len(entry) == Holder.TOPIC:
            kind, user, client, amount, limit, topic = entry
        elif len(entry) == Holder.TENANT:
            kind, user, client, amount, limit, topic, tenant = entry
        else:
            raise FleetRecordError(f"a usage entry has {len(entry)} elements, not 5, 6 or 7")
        quota_type = _QUOTA_TYPES[kind]  # type: ignore[index]
        if users is not None:
            kept = users[kind][len(entry)]  # type: ignore[index]
            if kept is not None and (tenant if len(entry) == Holder.TENANT else user) not in kept:
                continue
        # _make: a NamedTuple's own constructor costs a Python call each; a bucket of a kept user that is not kept
        # itself (another client id) is passed over by ``absorb``
        key = QuotaKey._make((str(user), str(client), "", str(topic), str(tenant)))
        usage.append(SharedUsage._make((quota_type, key, float(amount), float(limit))))  # type: ignore[arg-type]
    return tuple(usage)


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
    if entry.key.tenant and (entry.quota_type not in TENANT_TYPES or entry.key[:4] != ("", "", "", "")):
        raise FleetRecordError(f"usage of {entry.key}: a tenant's bucket of type {entry.quota_type}, or naming more")
    if not _positive(entry.limit) or not math.isfinite(entry.amount):
        raise FleetRecordError(f"usage of {entry.key}: limit {entry.limit}, amount {entry.amount}")
    if entry.amount < 0 and not QUOTA_TYPES[entry.quota_type].gives_back:
        raise FleetRecordError(f"usage of {entry.key}: a negative amount {entry.amount} of {entry.quota_type}")


HOLD_MS = 1_000
"""How long a rate's bucket far from its limit, or used here below its share, may wait before it is published
(``UsageShare.take``)."""
HELD_TYPES = types_shared(FleetSharing.AMOUNTS_HELD)
"""Rates, which a second's delay of a small share barely moves; mutations and producer IDs are never held."""
HELD_BELOW_LIMIT = 0.5
"""A rate's bucket whose rate, the whole fleet's as this member measures it, is below this share of its limit is
held too, while what this member holds is also below this share of the limit over the time it holds it: far from
its limit, a second's delay changes no decision. The second condition is for a burst: a bucket's first 10 s (Kafka's
floor on a rate's window) measure a rate a tenth of what was charged, and each member of a fleet would otherwise hide
up to five seconds of the limit from the others for a second, letting a burst through the fleet well past what Kafka's
broker lets through (measured in docs/fleet.md, "What is shared")."""


class _Pending:
    """One bucket's usage not published yet."""

    __slots__ = ("amount", "limit", "rate", "since_ms", "this_interval")

    def __init__(self, amount: float, limit: float, rate: float | None) -> None:
        self.amount = amount
        self.limit = limit
        self.rate = rate
        """The bucket's rate (the fleet's, as this member measured it) at its last charge; None: not measured."""
        self.since_ms: int | None = None
        """The start of the interval it was first charged in (set at the first take that holds it)."""
        self.this_interval = amount
        """What was charged since the last take: what ``on_urgent`` judges."""


@dataclass
class UsageShare:
    """What this instance charged since its last publication, merged per bucket.

    A bucket charged ``limit x urgent_after_s`` or more within a publish interval (this proxy alone
    used up the whole budget of a publish interval) calls ``on_urgent``: the others would otherwise
    learn it a whole interval late, while the budget is contended, which lets the fleet overshoot by
    what each member admits in that time.

    A rate's bucket used here below its share of the limit (``limit / members``), or whose fleet-wide rate
    is below half its limit while its rate here is too, is held, its usage adding up, and published once
    neither holds or it is ``HOLD_MS`` old: in a fleet of a hundred most principals use a sliver of their
    quota at each member, and publishing each of them every interval made every member read more than it
    could (``bench/fleet_scale.py``). What the others miss meanwhile is at most a second of usage, of buckets
    far from their limit or of members' small shares: it can hide no overshoot larger than about one
    second of the limit in Kafka's 11-s window, and once a bucket nears its limit the members carrying it
    publish it every interval.
    """

    urgent_after_s: float = 0.0
    on_urgent: Callable[[], None] | None = None

    usage: dict[tuple[QuotaType, QuotaKey], _Pending] = field(default_factory=dict)
    producer_ids: dict[str, tuple[float, list[int]]] = field(default_factory=dict)
    """user -> (limit, new producer ids)."""
    dropped: int = 0
    """Entries not kept because MAX_PENDING_ENTRIES were waiting."""
    _pending_pids: int = field(default=0, init=False)

    def charged(self, quota_type: QuotaType, key: QuotaKey, amount: float, limit: float,
                rate: float | None = None) -> None:
        """``rate``: the bucket's rate after the charge, when the charging manager measured it."""
        entry = self.usage.get((quota_type, key))
        if entry is None:
            if len(self.usage) + self._pending_pids >= MAX_PENDING_ENTRIES:
                self.dropped += 1
                return
            entry = self.usage[(quota_type, key)] = _Pending(amount, limit, rate)
        else:
            entry.amount += amount
            entry.this_interval += amount
            entry.limit = limit
            entry.rate = rate
        self._check_urgent(entry.this_interval, limit)

    def withdrawn(self, quota_type: QuotaType, key: QuotaKey, amount: float) -> None:
        """Take back ``amount`` of what was charged to a bucket and is not published yet (a fetch answered without
        its records, for another quota's sake): the others must not count bytes the client never got. Never below
        zero: what went out already stays."""
        entry = self.usage.get((quota_type, key))
        if entry is not None:
            entry.amount = max(0.0, entry.amount - amount)
            entry.this_interval = max(0.0, entry.this_interval - amount)

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

    def take(self, instance: str, oldest_ms: int, now_ms: int | None = None, members: int = 1) -> list[Publication]:
        """What is due, as publications of at most MAX_ENTRIES_PER_RECORD entries, each headed by the start of the
        interval its usage was first charged in. ``oldest_ms``: when the interval now ending started (the previous
        take); ``now_ms``: now (None: nothing is held); ``members``: the fleet's, this one included."""
        if not self:
            return []
        interval_ms = self.urgent_after_s * 1000
        due: dict[int, list[SharedUsage]] = {}
        held: dict[tuple[QuotaType, QuotaKey], _Pending] = {}
        for (kind, key), entry in self.usage.items():
            since = oldest_ms if entry.since_ms is None else entry.since_ms
            if not entry.amount:
                continue
            if now_ms is not None and kind in HELD_TYPES and now_ms - since + interval_ms < HOLD_MS and _may_wait(
                    entry, max(now_ms - since, interval_ms) / 1000, members):
                entry.since_ms, entry.this_interval = since, 0.0
                held[(kind, key)] = entry
                continue
            due.setdefault(since, []).append(SharedUsage(kind, key, entry.amount, entry.limit))
        pids = [SharedProducerIds(user, limit, tuple(ids[i:i + MAX_ENTRIES_PER_RECORD]))
                for user, (limit, ids) in self.producer_ids.items()
                for i in range(0, len(ids), MAX_ENTRIES_PER_RECORD)]
        if pids:
            due.setdefault(oldest_ms, [])
        self.usage, self.producer_ids, self._pending_pids = held, {}, 0
        return [publication for since, usage in sorted(due.items())
                for publication in _chunks(instance, since, usage, pids if since == oldest_ms else [])]


def _may_wait(entry: _Pending, held_s: float, members: int) -> bool:
    """Whether a rate's bucket holding ``held_s`` seconds of usage may wait: used here below its share of the limit,
    or far from its limit fleet-wide while this member's own usage is too (``HELD_BELOW_LIMIT``)."""
    if entry.amount * members < entry.limit * held_s:
        return True
    return (entry.rate is not None and entry.rate < HELD_BELOW_LIMIT * entry.limit
            and entry.amount < HELD_BELOW_LIMIT * entry.limit * held_s)


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
