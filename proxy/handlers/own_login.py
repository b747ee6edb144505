"""The proxy's own login on the cluster out of every client's reach: its SCRAM credentials, and, where the cluster
sees that login for every client's requests (``sasl-mode`` "none" or "terminate"), its delegation tokens.

AlterUserScramCredentials changing the credentials of the proxy's own user (``[upstream-sasl]``) is refused whole,
in every mode, whoever asks and whatever the ACLs say (Kafka lets ALTER on the cluster change any user's), as the
proxy's own topics are: it would give a client a password for the proxy's identity, or shut the proxy out of the
cluster. Every user it names gets CLUSTER_AUTHORIZATION_FAILED, as Kafka refuses the request whole
(``getErrorResponse``).

The delegation-token APIs (CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken,
DescribeDelegationToken) are answered by the proxy, as a Kafka cluster without delegation tokens answers them.

Forwarded, a token would be the proxy login's: a password any client could have made for the proxy's own identity on
the cluster, to reach it around every quota and ACL of the proxy; and DescribeDelegationToken would hand any client the
HMACs (the passwords) of the proxy login's tokens. The proxy holds no tokens of its own (a ``tokenauth`` login is
refused in terminate mode), so it answers as Kafka 4.3 does when ``delegation.token.secret.key`` is not set, in the
order of its checks (``KafkaApis.handleCreateTokenRequest`` and the others, then ``DelegationTokenControlManager``):

- DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a connection Kafka takes no token requests on (``allowTokenRequests``):
  without SASL, unless a client certificate names the principal (Kafka refuses PLAINTEXT, and SSL as ANONYMOUS);
- CreateDelegationToken for another owner: DELEGATION_TOKEN_AUTHORIZATION_FAILED without CREATE_TOKENS on that user
  (with the authorizer; without it, Kafka's cluster has no authorizer either), then INVALID_PRINCIPAL_TYPE for a
  renewer that is not a ``User`` (an owner of a null type fails the request, UNKNOWN_SERVER_ERROR, as Kafka's
  principal throws);
- then DELEGATION_TOKEN_AUTH_DISABLED, and DescribeDelegationToken lists no tokens.

Where clients log in to the cluster themselves (``sasl-mode = "inspect"``) the tokens are theirs, and these APIs go to
the cluster.
"""

from __future__ import annotations

from typing import Any

from protocol.apis import Api
from protocol.cluster_refusals import cluster_administration_refused, scram_credentials_altered
from protocol.codecs import decode_request, encode_response
from protocol.errors import (
    DELEGATION_TOKEN_AUTH_DISABLED,
    DELEGATION_TOKEN_AUTHORIZATION_FAILED,
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
    INVALID_PRINCIPAL_TYPE,
    UNKNOWN_SERVER_ERROR,
)
from protocol.header import RequestHeader
from proxy.decision.outcome import CLOSE, FORWARD, Caller, Decided, local_answer
from proxy.security.access import Access
from proxy.security.acls import AclOperation, ResourceType
from quotas.config import ANONYMOUS

TOKEN_APIS = frozenset({Api.CREATE_DELEGATION_TOKEN, Api.RENEW_DELEGATION_TOKEN, Api.EXPIRE_DELEGATION_TOKEN,
                        Api.DESCRIBE_DELEGATION_TOKEN})
FIRST_TOKEN_API_VERSION = 1
"""Kafka 4.3 serves these APIs from v1 on (v0 was removed)."""
USER_TYPE = "User"
ERROR_TIMESTAMP = -1
"""The timestamps of an answer Kafka's broker refuses itself (``DelegationTokenManager.ERROR_TIMESTAMP``); its
controller leaves them at 0 in its own refusals."""


class DelegationTokensWithoutTokens:
    def __init__(self, access: Access, logins: bool) -> None:
        """``logins``: clients log in with SASL (terminate mode), which Kafka takes token requests on."""
        self._access = access
        self._logins = logins

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        if version < FIRST_TOKEN_API_VERSION:
            return CLOSE  # not offered, as Kafka does not offer it
        request = decode_request(api_key, version, frame[header.length:])
        allowed = self._logins or caller.user != ANONYMOUS
        if api_key == Api.CREATE_DELEGATION_TOKEN:
            return local_answer(header, encode_response(api_key, version, self._created(request, caller, allowed)))
        code = DELEGATION_TOKEN_AUTH_DISABLED if allowed else DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        if api_key == Api.DESCRIBE_DELEGATION_TOKEN:
            answer: dict[str, Any] = {"error_code": code, "tokens": [], "throttle_time_ms": 0}
        else:  # renewed or expired
            answer = {"error_code": code, "expiry_timestamp_ms": 0 if allowed else ERROR_TIMESTAMP,
                      "throttle_time_ms": 0}
        return local_answer(header, encode_response(api_key, version, answer))

    def _created(self, request: Any, caller: Caller, allowed: bool) -> dict[str, Any]:
        requester = (USER_TYPE, caller.user)
        owner = requester
        if request.owner_principal_name:  # null or empty (and before v3, absent): the requester's own
            if request.owner_principal_type is None:  # Kafka's principal cannot be made: its handler throws
                anonymous = (USER_TYPE, ANONYMOUS)
                return _creation(UNKNOWN_SERVER_ERROR, anonymous, anonymous, ERROR_TIMESTAMP)
            owner = (request.owner_principal_type, request.owner_principal_name)
        if not allowed:
            code = DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        elif owner != requester and not self._access.allows(caller, AclOperation.CREATE_TOKENS, ResourceType.USER,
                                                            ":".join(owner)):
            code = DELEGATION_TOKEN_AUTHORIZATION_FAILED
        elif any(renewer.principal_type != USER_TYPE for renewer in request.renewers):
            code = INVALID_PRINCIPAL_TYPE
        else:
            return _creation(DELEGATION_TOKEN_AUTH_DISABLED, owner, requester, 0)
        return _creation(code, owner, requester, ERROR_TIMESTAMP)


def _creation(code: int, owner: tuple[str, str], requester: tuple[str, str], timestamp: int) -> dict[str, Any]:
    return {"error_code": code, "principal_type": owner[0], "principal_name": owner[1],
            "token_requester_principal_type": requester[0], "token_requester_principal_name": requester[1],
            "issue_timestamp_ms": timestamp, "expiry_timestamp_ms": timestamp, "max_timestamp_ms": timestamp,
            "token_id": "", "hmac": b"", "throttle_time_ms": 0}


class OwnCredentialsKept:
    """AlterUserScramCredentials: refused whole when it changes the credentials of ``own_user``, the proxy's login."""

    def __init__(self, own_user: str) -> None:
        self._own_user = own_user

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        api_key, version = header.api_key, header.api_version
        body = frame[header.length:]
        if self._own_user not in scram_credentials_altered(decode_request(api_key, version, body)):
            return FORWARD
        answer = cluster_administration_refused(api_key, version, body, f"The credentials of {self._own_user}, the "
                                                "proxy's own login, are not changed through the proxy.")
        assert answer is not None, "every user named is answered"
        return local_answer(header, answer)
