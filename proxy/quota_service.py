"""The quota engines as the proxy runs them: one configuration, three managers, live reloads.

The quota file is re-read when it changes; a bad file keeps the running configuration and logs
why. Time for quota decisions is ``now_ms()``, read once per request by the caller.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from quotas.config import QuotaConfig, QuotaConfigError, load_quota_file
from quotas.managers import ClientQuotaManager, ControllerMutationQuotaManager, ProducerIdQuotaManager
from quotas.metrics import QuotaMetrics

log = logging.getLogger(__name__)

RELOAD_INTERVAL_S = 1.0


def now_ms() -> int:
    """Quota time: monotonic, so wall-clock jumps never refill or drain a bucket."""
    return time.monotonic_ns() // 1_000_000


class QuotaService:
    def __init__(self, quota_file: Path | None, registry: CollectorRegistry) -> None:
        self._quota_file = quota_file
        self._file_stamp: tuple[int, int] | None = None
        config = self._load() if quota_file is not None else QuotaConfig()
        self.produce = ClientQuotaManager(config)
        self.mutations = ControllerMutationQuotaManager(config)
        self.producer_ids = ProducerIdQuotaManager(config)
        QuotaMetrics(registry, self.produce, self.mutations, self.producer_ids, now_ms)

    @property
    def config(self) -> QuotaConfig:
        return self.produce.config

    def _stamp(self) -> tuple[int, int] | None:
        assert self._quota_file is not None
        try:
            stat = os.stat(self._quota_file)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _load(self) -> QuotaConfig:
        """Initial load: a bad or missing file is fatal (raises QuotaConfigError)."""
        assert self._quota_file is not None
        self._file_stamp = self._stamp()
        config = load_quota_file(self._quota_file)
        log.info("loaded %d quota entries from %s", len(config.entries), self._quota_file)
        return config

    def apply(self, config: QuotaConfig) -> None:
        for manager in (self.produce, self.mutations, self.producer_ids):
            manager.update_config(config)

    def reload_if_changed(self) -> None:
        if self._quota_file is None:
            return
        stamp = self._stamp()
        if stamp == self._file_stamp:
            return
        self._file_stamp = stamp
        try:
            config = load_quota_file(self._quota_file)
        except QuotaConfigError as error:
            log.error("keeping the running quotas: %s", error)
            return
        self.apply(config)
        log.info("reloaded %d quota entries from %s", len(config.entries), self._quota_file)

    async def maintain(self) -> None:
        """Reload the file when it changes and drop expired producer-ID filters (KIP-936 cleanup)."""
        while True:
            await asyncio.sleep(RELOAD_INTERVAL_S)
            self.reload_if_changed()
            self.producer_ids.expire(now_ms())
