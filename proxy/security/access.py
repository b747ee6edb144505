"""What a request's principal may do, as the request handlers ask it: nothing on the proxy's own topics, whoever it
is, and, with the authorizer on (``[authorizer]``), what Kafka's ACLs allow it (``acls``).

The proxy's own topics are what a topic the principal may not use is to Kafka, so a handler asks one question of
both: may this principal do this operation on this topic (``topic_refusal``)."""

from __future__ import annotations

from collections.abc import Callable

from proxy.decision.outcome import Caller
from proxy.security.acls import AclAuthorizer, AclOperation, Requester, ResourceType

TopicRefusal = Callable[[str | None], bool]
"""True for a topic (by name) the request may not use; a topic the proxy cannot name (an id the cluster does not
know) is not refused here: the cluster answers it unknown, as Kafka does before authorizing."""


class Access:
    def __init__(self, reserved_topics: frozenset[str] = frozenset(), authorizer: AclAuthorizer | None = None) -> None:
        self.reserved_topics = reserved_topics
        self.authorizer = authorizer

    @property
    def guards_topics(self) -> bool:
        """Some topic may be refused: a request's topics must be read."""
        return bool(self.reserved_topics) or self.authorizer is not None

    def topic_refusal(self, caller: Caller, operation: AclOperation) -> TopicRefusal:
        """Which topics the caller may not do ``operation`` on."""
        reserved = self.reserved_topics
        authorizer = self.authorizer
        if authorizer is None:
            return reserved.__contains__
        requester = requester_of(caller)

        def refused(name: str | None) -> bool:
            return name is not None and (name in reserved or not authorizer.authorize(
                requester, operation, ResourceType.TOPIC, name))
        return refused

    def allows(self, caller: Caller, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """The caller may do ``operation`` on the resource (always, without the authorizer)."""
        return self.authorizer is None or self.authorizer.authorize(requester_of(caller), operation, resource_type,
                                                                    name)


def requester_of(caller: Caller) -> Requester:
    return caller.principal, caller.host
