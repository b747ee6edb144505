"""What a request's principal may do, as the request handlers ask it: nothing on the proxy's own topics, whoever it
is, and, with the authorizer on (``[authorizer]``), what Kafka's ACLs allow it (``acls``).

The proxy's own topics are what a topic the principal may not use is to Kafka, so a handler asks one question of
both: may this principal do this operation on this topic (``topic_refusal``)."""

from __future__ import annotations

from collections.abc import Hashable

from protocol.refused_topics import NameRefusal
from proxy.decision.outcome import Caller
from proxy.security.acls import AclAuthorizer, AclOperation, Requester, ResourceType

_KEPT_REFUSALS = 10_000
"""Refusals (``topic_refusal``) kept for principal, host and operation at most; past it they are made again."""
_KEPT_ALLOWANCES = 10_000
"""Requests found allowed (``found_allowed``) kept at most; past it they are judged again."""


class Access:
    def __init__(self, reserved_topics: frozenset[str] = frozenset(), authorizer: AclAuthorizer | None = None) -> None:
        self.reserved_topics = reserved_topics
        self.authorizer = authorizer
        self._refusals: dict[tuple[str, str, AclOperation], NameRefusal] = {}
        """``topic_refusal``'s, made once for each principal, host and operation (each asks the ACLs in force when
        it is called): every request asks for one."""
        self._allowances: dict[tuple[str, str, AclOperation, Hashable], int] = {}
        """The generation of the ACLs that allowed each (``found_allowed``)."""

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

    def allowed_before(self, caller: Caller, operation: AclOperation, asked: Hashable) -> bool:
        """With the authorizer, the ACLs in force have allowed the caller ``operation`` on all that ``asked`` names
        (``found_allowed``): a client sends the same requests again and again, each judged once for each change of
        the ACLs."""
        authorizer = self.authorizer
        return authorizer is not None and self._allowances.get(
            (caller.user, caller.host, operation, asked)) == authorizer.generation

    def found_allowed(self, caller: Caller, operation: AclOperation, asked: Hashable) -> None:
        """The ACLs in force allow the caller ``operation`` on all that ``asked`` names (a handler's reading of a
        request: the same reading names the same resources, whenever it is made). Without the authorizer nothing is
        kept: only the proxy's own topics are refused, and a reading is judged faster than looked up."""
        authorizer = self.authorizer
        if authorizer is None:
            return
        if len(self._allowances) >= _KEPT_ALLOWANCES:
            self._allowances.clear()
        self._allowances[(caller.user, caller.host, operation, asked)] = authorizer.generation

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
