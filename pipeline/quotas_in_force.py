"""The quota each principal had over time, and where it was set.

The usage log says it: the proxy writes the quotas in force when they change and atop each hourly file
(``QUOTAS_FIELD``). Before a log's first such line (a log written by an older proxy) the report can only take what it
is given: the quota file and the AlterClientQuotas overrides of the state directory, laid over it as the proxy lays
them (``given_quotas``), standing for every second before that line.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from quotas.config import QuotaConfig, QuotaEntity, QuotaType, load_quota_file
from quotas.overrides import overlaid, read_overrides
from quotas.quota_types import QUOTA_TYPES
from quotas.usage_record import snapshot_config


class QuotaStep(NamedTuple):
    """A quota from ``start`` (epoch seconds) until the next step: ``limit`` None where there was none."""

    start: int
    limit: float | None
    source: str
    """Where it was set: the quota file's entry, or AlterClientQuotas; "" where there was none."""
    observed: bool = False
    """Observed (observe mode), not enforced."""


def given_quotas(quota_file: Path | None, client_quotas: Path | None) -> QuotaConfig | None:
    """The quota file overlaid by the overrides of ``client_quotas`` (either may be missing), or None without either
    (raises QuotaConfigError when one cannot be read)."""
    if quota_file is None and client_quotas is None:
        return None
    file_config = load_quota_file(quota_file) if quota_file is not None else QuotaConfig()
    if client_quotas is None:
        return file_config
    return overlaid(file_config, read_overrides(client_quotas), str(client_quotas))


class QuotasInForce:
    """The quotas in force at each second: the usage log's snapshots in time order, and ``given`` before the first."""

    def __init__(self, snapshots: Iterable[tuple[int, Sequence[Mapping[str, Any]]]],
                 given: QuotaConfig | None = None) -> None:
        self._times: list[int] = []
        self._configs: list[QuotaConfig] = []
        last: Sequence[Mapping[str, Any]] | None = None
        for time_s, snapshot in sorted(snapshots, key=lambda entry: entry[0]):
            if snapshot != last:  # atop every hourly file: most repeat the one before
                self._times.append(time_s)
                self._configs.append(snapshot_config(snapshot))
                last = snapshot
        self._given = given

    def steps(self, quota_type: QuotaType, user: str, client_id: str, first: int, last: int) -> list[QuotaStep]:
        """The quota of (``user``, ``client_id``) at ``first``, and each change of it until ``last``."""
        configs = [(first, self._at(first))] + [(time_s, config) for time_s, config in zip(self._times, self._configs,
                                                                                             strict=True)
                                               if first < time_s <= last]
        steps: list[QuotaStep] = []
        for time_s, config in configs:
            step = _step(config, quota_type, user, client_id, time_s)
            if not steps or step[1:] != steps[-1][1:]:
                steps.append(step)
        return steps

    def tenant_budget(self, quota_type: QuotaType, tenant: str, time_s: int) -> float | None:
        """The budget of ``quota_type`` the tenant had at ``time_s``, or None."""
        config = self._at(time_s)
        return None if config is None else config.entries.get(QuotaEntity(tenant=tenant), {}).get(quota_type)

    def _at(self, time_s: int) -> QuotaConfig | None:
        """The snapshot in force at ``time_s``: the last at or before it, else ``given``."""
        index = bisect.bisect_right(self._times, time_s) - 1
        return self._given if index < 0 else self._configs[index]


def _step(config: QuotaConfig | None, quota_type: QuotaType, user: str, client_id: str, start: int) -> QuotaStep:
    # a quota set on users only (a producer-ID quota, KIP-936): the client id takes no part
    resolved = None if config is None else config.resolve(
        quota_type, user, "" if QUOTA_TYPES[quota_type].user_only else client_id)
    if resolved is None or config is None:
        return QuotaStep(start, None, "")
    return QuotaStep(start, resolved.limit, config.origins.get((resolved.entity, quota_type), ""), resolved.observed)
