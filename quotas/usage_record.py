"""The usage log's record: shared by the proxy, which writes it, and the reporting job, which reads it.

One JSON line per (user, client id) for each second with traffic: ``time`` (epoch seconds), ``user``,
``client_id``, ``tenant`` when the user belongs to one (``TENANT_FIELD``) and these counters; one per (user, client
id, broker id) for each second in which producer-ID blocks were handed out; and one per (user, topic) for each second
with bytes of a topic under a topic quota; and, with ``quotas`` instead of a user, the quotas in force from that second
on (``quota_snapshot``). A field added here is a column of the report; lines written before it existed read it
as 0.
"""

import calendar
import time
from collections.abc import Iterable, Mapping
from typing import Any

from quotas.config import QuotaConfig, QuotaEntity, QuotaMode, QuotaType

USAGE_FIELDS = ("bytes", "produce_requests", "new_pids", "mutations", "throttle_ms", "rejections", "fetch_bytes",
                "observed_throttled", "observed_throttle_ms")
"""``bytes``: Produce request bytes; ``fetch_bytes``: Fetch response bytes charged to a consumer;
``observed_throttled``: requests an observed quota let through that enforcement would have throttled or
refused, ``observed_throttle_ms`` the throttles it would have given them."""

TOPIC_FIELDS = ("topic_bytes", "topic_fetch_bytes")
"""Record bytes one user wrote to (``topic_bytes``) and read from (``topic_fetch_bytes``) one topic in the second.
They are counted on lines of their own, which carry ``topic`` and no ``client_id``, where the proxy measures
them: while a topic quota of that direction is in the quota file (an observed one on the ``<default>`` topic
measures every topic and holds nobody back)."""

BLOCK_FIELDS = ("blocks", "block_ids")
"""Producer-ID blocks handed out (AllocateProducerIds) and the IDs in them. They are counted on lines of
their own, which also carry ``broker_id`` (the requesting broker) and none of USAGE_FIELDS: a line with
``broker_id`` is a block line, any other a client's."""


TENANT_FIELD = "tenant"
"""The ``[[tenant]]`` a client line's user belonged to in that second, as the quota file then said; absent for a user
of none."""

QUOTAS_FIELD = "quotas"
"""A line ``{"time": T, "quotas": [...]}`` lists every quota in force from second T on (``quota_snapshot``): the
proxy writes one when they change (the quota file reloaded, AlterClientQuotas) and at the top of each hourly
file, so a report of any hours knows the quota each principal had, and where it was set."""

QUOTA_ENTRY_FIELDS = ("user", "client_id", "ip", "topic", "tenant", "quota_type", "limit", "mode", "source")
"""One quota of a ``QUOTAS_FIELD`` line: its entity (the parts it has; ``<default>`` for a default; a tenant's budget
names its tenant), type, limit, mode (``enforce``, ``observe``) and where it was set (the quota file's entry, or
AlterClientQuotas)."""


def quota_snapshot(config: QuotaConfig) -> list[dict[str, Any]]:
    """Every quota of ``config``, as a ``QUOTAS_FIELD`` line lists them."""
    return [{"user": entity.user, "client_id": entity.client_id, "ip": entity.ip, "topic": entity.topic,
             "tenant": entity.tenant, "quota_type": str(quota_type), "limit": limit,
             "mode": str(config.mode_of(entity)), "source": config.origins.get((entity, quota_type), "")}
            for entity, quotas in config.entries.items() for quota_type, limit in quotas.items()]


def snapshot_config(snapshot: Iterable[Mapping[str, Any]]) -> QuotaConfig:
    """The quotas a ``quota_snapshot`` lists, to resolve a principal's, or to find a tenant's budget (its tenants'
    principals are not in it); raises QuotaConfigError when one is not a valid quota."""
    entries: dict[QuotaEntity, dict[QuotaType, float]] = {}
    modes: dict[QuotaEntity, QuotaMode] = {}
    origins: dict[tuple[QuotaEntity, QuotaType], str] = {}
    for quota in snapshot:
        entity = QuotaEntity(quota["user"], quota["client_id"], quota["ip"], quota["topic"], quota.get("tenant"))
        quota_type = QuotaType(quota["quota_type"])
        entries.setdefault(entity, {})[quota_type] = float(quota["limit"])
        modes[entity] = QuotaMode(quota["mode"])
        origins[(entity, quota_type)] = quota["source"] or ""
    return QuotaConfig(None, entries, modes, origins)


_FILE_NAME_FORMAT = "usage-%Y-%m-%dT%H.jsonl"

POSITION_HEADER = "usage-position"
"""The header of a usage line's record in the usage log's topic (``[usage] topic``): where the line is, as
``LOG-ID/usage-YYYY-MM-DDTHH.jsonl:offset`` (the id made once for a proxy's usage log). It names the line: a line sent
twice (a proxy stopped between the cluster's acknowledgement and the write of its position) is counted once."""


def usage_file_name(epoch_s: int) -> str:
    """The hour's file the proxy appends a second's lines to."""
    return time.strftime(_FILE_NAME_FORMAT, time.gmtime(epoch_s))


def usage_file_hour(name: str) -> int | None:
    """The epoch second the hour of file ``name`` starts at, or None when it is not a usage file."""
    try:
        return calendar.timegm(time.strptime(name, _FILE_NAME_FORMAT))
    except ValueError:
        return None
