"""Why the proxy closes a client connection: one name per cause, the words its log line gives, and whether the
cause is worth a warning (something an operator may need to act on) or only a debug line (clients come and go)."""

from __future__ import annotations

import enum


class CloseReason(enum.Enum):
    # the client
    CLIENT_LEFT = ("client disconnected", False)
    TRUNCATED_FRAME = ("truncated frame", True)
    BAD_REQUEST = ("bad request frame", True)
    TOO_MUCH_BEFORE_UPSTREAM = ("sent more than a frame before the upstream connection opened", True)
    IDLE = ("idle", False)
    # who the client is
    NO_PRINCIPAL = ("no principal for its certificate", False)
    LOGIN_REFUSED = ("its login was refused", False)
    LOGIN_TOO_SLOW = ("no login in time", False)
    OVER_USER_CONNECTION_RATE = ("over its user's connection creation rate", False)
    # what a request or its answer asked for
    CLOSE_AFTER_RESPONSE = ("closed after its last response", False)
    ACKS0_PARTITION_ERROR = ("closed after an acks=0 request with a partition error (as Kafka does)", True)
    UNDECIDABLE = ("could not decide on a request", True)
    # the cluster
    UPSTREAM_UNREACHABLE = ("upstream unreachable", True)
    UPSTREAM_LOST = ("upstream lost", False)
    """Worth a warning only when requests were awaiting their answers (the caller says so)."""
    BAD_RESPONSE = ("bad response from upstream", True)
    REQUEST_TIMEOUT = ("the cluster sent nothing for a request in time", True)
    # the proxy
    SHUTDOWN = ("closed for shutdown", False)
    SHUTDOWN_DEADLINE = ("aborted at shutdown deadline", False)
    """Worth a warning only when requests were awaiting their answers (the caller says so)."""
    INTERNAL_ERROR = ("internal error", True)

    def __init__(self, words: str, warns: bool) -> None:
        self.words = words
        self.warns = warns

    def describe(self, detail: str = "") -> str:
        """The log line's words: the reason's own, then what this close adds (the error, the request)."""
        return f"{self.words}: {detail}" if detail else self.words
