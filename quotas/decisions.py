"""Every quota manager's one interface: ``record(requester, amount, now_ms)``, what one request (or connection) of
``requester`` costs, at quota time ``now_ms``, in the manager's unit (bytes, requests, partition mutations, producer
IDs, connections); it gives back a decision: admitted or not, the throttle, the bucket charged, and what an observed
quota would have done. The managers resolve which quota applies to the requester (Kafka's precedence of user and
client id, ``QuotaConfig``) on every charge."""

from __future__ import annotations

from typing import NamedTuple

from quotas.config import QuotaKey


class Requester(NamedTuple):
    """Who a charge is for, as a Kafka broker knows a request's session: its principal and client id; and the
    upstream broker its bytes go to or come from (a budget of its own in ``broker`` scope)."""

    user: str
    client_id: str = ""
    broker: str = ""


class Decision(NamedTuple):
    admitted: bool
    throttle_ms: int
    key: QuotaKey | None = None
    """The bucket charged, or None when no quota applies."""
    observed_ms: int = 0
    """An observed quota: the throttle enforcement would have given (``throttle_ms`` is 0)."""


class MutationDecision(NamedTuple):
    admitted: bool
    """False when at least one topic was rejected."""
    throttle_ms: int
    key: QuotaKey | None
    topics_admitted: tuple[bool, ...]
    """One per topic of the request, in request order."""
    observed_ms: int = 0
    """An observed quota: the throttle enforcement would have given."""
    observed_refusals: int = 0
    """An observed quota: the topics enforcement would have refused (all were admitted)."""


class PidDecision(NamedTuple):
    admitted: bool
    """False only in reject mode: the request must not be forwarded."""
    throttle_ms: int
    key: QuotaKey | None = None
    new_pids: tuple[int, ...] = ()
    """Producer IDs seen for the first time in this window and charged (remembered from now)."""
    over_quota_pids: tuple[int, ...] = ()
    """Unseen producer IDs that found the bucket below zero (not charged, not remembered)."""
    observed_ms: int = 0
    """An observed quota: the throttle (or, in reject mode, the refusal's) enforcement would have given."""
    observed_refused: bool = False
    """An observed quota in reject mode: enforcement would have refused the request."""


UNLIMITED = Decision(True, 0)
NO_PID_CHARGED = PidDecision(True, 0)
"""Admitted, nothing charged: no producer-ID quota applies, or the request carries no producer ID."""
