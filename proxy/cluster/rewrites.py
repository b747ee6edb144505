"""The cluster's answers as the proxy rewrites them, remembered by the bytes the cluster sent.

A broker sends the same bytes for the same question while its state does not change (the list of
api versions, the brokers and topics of a Metadata answer), and decoding and encoding them again
costs the event loop enough (docs/deploying.md, "Limits and bad input") that a client flooding such
requests would otherwise keep every other client waiting. The rewrite is a function of those bytes,
so a remembered one is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

RewriteKey = tuple[Hashable, int, bytes]
"""api key (with whatever else the rewrite depends on: whose answer it is), api version, the response body the cluster
sent."""


class RewriteMemo:
    """Rewritten bodies (or None: left as they are) by ``RewriteKey``, forgotten all at once when the
    bodies kept reach ``max_bytes``: a cluster whose answers keep changing just rewrites each one."""

    __slots__ = ("_max_bytes", "_bytes", "_rewritten")

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._rewritten: dict[RewriteKey, bytes | None] = {}

    def rewritten(self, key: RewriteKey, rewrite: Callable[[], bytes | None]) -> bytes | None:
        try:
            return self._rewritten[key]
        except KeyError:
            pass
        body = rewrite()
        size = len(key[2]) + (len(body) if body is not None else 0)
        if size > self._max_bytes:
            return body
        if self._bytes + size > self._max_bytes:
            self._rewritten.clear()
            self._bytes = 0
        self._rewritten[key] = body
        self._bytes += size
        return body
