"""Whether a topic the proxy keeps shared state in answers, with the change logged once."""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)

FAILURE_LOG_INTERVAL_S = 60.0
RETRY_BACKOFF_S = 1.0
"""How long a use of one of the proxy's own topics waits after a failure before it tries the cluster again."""


class TopicLink:
    """One way of using a topic (publishing to it, reading it): a change of state is logged, a continuing
    failure at most once a minute, as ``"<owner>: can <action> <topic>"`` and ``"<owner>: cannot <action> <topic>
    (<error>): <meanwhile>"``."""

    def __init__(self, owner: str, action: str, topic: str, meanwhile: str) -> None:
        self._what = f"{owner}: can{{}} {action} {topic}"
        self._meanwhile = meanwhile
        self.up = False
        self.failures = 0
        self._logged_at = float("-inf")

    def succeeded(self) -> None:
        if not self.up:
            log.info(self._what.format(""))
        self.up = True

    def failed(self, error: BaseException) -> None:
        self.failures += 1
        now = time.monotonic()
        if self.up or now - self._logged_at >= FAILURE_LOG_INTERVAL_S:
            self._logged_at = now
            log.warning("%s (%s): %s", self._what.format("not"), error or type(error).__name__, self._meanwhile)
        self.up = False
