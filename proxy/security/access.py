"""What a request's principal may do, as the request handlers ask it: nothing on the proxy's own topics, whoever it
is, and, with the authorizer on (``[authorizer]``), what Kafka's ACLs allow it (``acls``).

The proxy's own topics are what a topic the principal may not use is to Kafka, so a handler asks one question of
both: may this principal do this operation on this topic (``topic_refusal``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from protocol.refused_topics import NameRefusal
from proxy.decision.footprint import footprint
from proxy.decision.outcome import Caller
from proxy.security.acls import AclAuthorizer, AclOperation, Requester, ResourceType

Reading = TypeVar("Reading", bound=Hashable)

_KEPT_REFUSALS = 10_000
"""Refusals (``topic_refusal``) kept for principal, host and operation at most; past it they are made again."""
_KEPT_ALLOWANCES_BYTES = 4 << 20
_LARGEST_KEPT_ALLOWANCE = 16 << 10
"""Requests found allowed (``judged_once``), kept up to this many bytes in all (``footprint``), each of at most
``_LARGEST_KEPT_ALLOWANCE``: past it they are all judged again."""


class Access:
    def __init__(self, reserved_topics: frozenset[str] = frozenset(), authorizer: AclAuthorizer | None = None) -> None:
        self.reserved_topics = reserved_topics
        self.authorizer = authorizer
        self._refusals: dict[tuple[str, str, AclOperation], NameRefusal] = {}
        """``topic_refusal``'s, made once for each principal, host and operation (each asks the ACLs in force when
        it is called): every request asks for one."""
        self._allowances: set[tuple[str, str, int, Hashable]] = set()
        """The requests the ACLs of ``_allowances_generation`` allowed (``judged_once``), by principal, host, API and
        what the request asks."""
        self._allowances_bytes = 0
        self._allowances_generation = 0

    @property
    def guards_topics(self) -> bool:
        """Some topic may be refused: a request's topics must be read."""
        return bool(self.reserved_topics) or self.authorizer is not None

    def topic_refusal(self, caller: Caller, operation: AclOperation) -> NameRefusal:
        """Which topics (by name) the caller may not do ``operation`` on. A topic the proxy has no name for is
        not refused here: a topic given by an id the proxy could not name is the handlers' to judge
        (``proxy.handlers.refused_topics.refused_by_name_or_id``)."""
        authorizer = self.authorizer
        if authorizer is None:
            return self.reserved_topics.__contains__
        key = (caller.user, caller.host, operation)
        refusal = self._refusals.get(key)
        if refusal is None:
            if len(self._refusals) >= _KEPT_REFUSALS:
                self._refusals.clear()
            refusal = self._refusals[key] = _topic_refusal(self.reserved_topics, authorizer, requester_of(caller),
                                                           operation)
        return refusal

    def judged_once(self, caller: Caller, api_key: int, asked: Reading, allowed: Callable[[Caller, Reading], bool]
                    ) -> bool:
        """``allowed(caller, asked)``: whether the caller may do all that a request of ``api_key`` asks, as its
        handler read it (``asked``: the same reading names the same resources whenever it is made, and does not
        change). With the authorizer, a reading found allowed is allowed again by a look-up while the ACLs do not
        change: a client sends the same requests again and again. Without it only the proxy's own topics are
        refused, which is judged as fast as looked up."""
        authorizer = self.authorizer
        if authorizer is None:
            return allowed(caller, asked)
        allowances = self._allowances
        if self._allowances_generation != authorizer.generation:  # what older ACLs allowed may no longer hold
            allowances.clear()
            self._allowances_bytes = 0
            self._allowances_generation = authorizer.generation
        key = (caller.user, caller.host, api_key, asked)
        if key in allowances:
            return True
        if not allowed(caller, asked):
            return False
        size = footprint(key)
        if size <= _LARGEST_KEPT_ALLOWANCE:
            if self._allowances_bytes + size > _KEPT_ALLOWANCES_BYTES:
                allowances.clear()
                self._allowances_bytes = 0
            allowances.add(key)
            self._allowances_bytes += size
        return True

    def allows(self, caller: Caller, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """The caller may do ``operation`` on the resource (always, without the authorizer)."""
        return self.authorizer is None or self.authorizer.authorize(requester_of(caller), operation, resource_type,
                                                                    name)


def _topic_refusal(reserved: frozenset[str], authorizer: AclAuthorizer, requester: Requester, operation: AclOperation
                   ) -> NameRefusal:
    authorize = authorizer.authorize

    def refused(name: str | None) -> bool:
        return name is not None and (name in reserved or not authorize(requester, operation, ResourceType.TOPIC, name))
    return refused


def requester_of(caller: Caller) -> Requester:
    return caller.principal, caller.host
