from __future__ import annotations

import asyncio
import time

import pytest

from protocol.apis import Api
from protocol.codecs import decode_response, encode_response
from protocol.errors import SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM
from proxy.decision.outcome import Forward, Outcome, Respond
from proxy.security.oauthbearer import OAuthBearerSettings
from proxy.security.sasl import LoginSettings
from proxy.security.sasl_inspect import SaslInspector, TokenOwnerUnknown
from proxy.security.sasl_messages import ScramClient, plain_token
from tests.support import encode_request
from tests.unit.proxy.outcomes import finish_of
from tests.unit.proxy.security.test_sasl import CountedLogins, unsecured_jwt


class KnownTokens:
    """The cluster's delegation tokens, as DescribeDelegationToken would name their owners."""

    def __init__(self, owners: dict[str, str] | None = None) -> None:
        self.owners = owners or {}
        self.asked: list[str] = []

    async def owner(self, token_id: str) -> str:
        self.asked.append(token_id)
        if token_id not in self.owners:
            raise TokenOwnerUnknown(f"no token {token_id!r}")
        return self.owners[token_id]


def inspector(claim: str = "sub", tokens: KnownTokens | None = None) -> SaslInspector:
    settings = LoginSettings(oauthbearer=OAuthBearerSettings(sub_claim_name=claim))
    return SaslInspector(settings, "10.0.0.9:4242", CountedLogins(), tokens or KnownTokens())


def forwarded(inspect: SaslInspector, api_key: int, version: int, **fields: object) -> Forward:
    outcome = inspect.handle(memoryview(encode_request(api_key, version, **fields))[4:])
    assert isinstance(outcome, Forward)
    return outcome


def cluster_answers(outcome: Forward, error_code: int, auth_bytes: bytes = b"") -> None:
    """The cluster's SaslAuthenticate v2 answer, passed through the inspector unchanged."""
    body = encode_response(Api.SASL_AUTHENTICATE, 2, {"error_code": error_code, "error_message": None,
                                                      "auth_bytes": auth_bytes, "session_lifetime_ms": 0})
    assert finish_of(outcome)(memoryview(body)) == body


def authenticate(inspect: SaslInspector, mechanism: str, *tokens: bytes) -> list[Forward]:
    forwarded(inspect, Api.SASL_HANDSHAKE, 1, mechanism=mechanism)
    return [forwarded(inspect, Api.SASL_AUTHENTICATE, 2, auth_bytes=token) for token in tokens]


def test_plain_user_is_the_principal_only_once_the_cluster_accepts() -> None:
    inspect = inspector()
    (step,) = authenticate(inspect, "PLAIN", plain_token("bob", "whatever"))
    assert not inspect.done
    cluster_answers(step, 0)
    assert inspect.user == "bob"
    refused = inspector()
    (step,) = authenticate(refused, "PLAIN", plain_token("bob", "wrong"))
    cluster_answers(step, 58)
    assert not refused.done and refused.refused and refused._events.ended == [("PLAIN", False)]  # type: ignore[attr-defined]


def test_scram_needs_both_answers() -> None:
    inspect = inspector()
    client = ScramClient("SCRAM-SHA-256", "carol,x", "pw")
    (first,) = authenticate(inspect, "SCRAM-SHA-256", client.first_message())
    cluster_answers(first, 0, b"r=...,s=...,i=4096")
    assert not inspect.done
    final = forwarded(inspect, Api.SASL_AUTHENTICATE, 2, auth_bytes=b"c=biws,r=...,p=...")
    cluster_answers(final, 0, b"v=...")
    assert inspect.user == "carol,x"  # escaped as carol=2Cx on the wire


def test_oauthbearer_principal_claim_and_an_error_sent_as_a_challenge() -> None:
    inspect = inspector("upn")
    (step,) = authenticate(inspect, "OAUTHBEARER", unsecured_jwt({"sub": "s-1", "upn": "erin", "exp": time.time()}))
    cluster_answers(step, 0)
    assert inspect.user == "erin"
    challenged = inspector()
    (step,) = authenticate(challenged, "OAUTHBEARER", unsecured_jwt({"sub": "erin"}))
    cluster_answers(step, 0, b'{"status":"invalid_token"}')
    assert not challenged.done
    final = forwarded(challenged, Api.SASL_AUTHENTICATE, 2, auth_bytes=b"\x01")
    cluster_answers(final, 58)
    assert not challenged.done


def test_a_mechanism_whose_tokens_name_nobody_is_refused_here() -> None:
    outcome = inspector().handle(memoryview(encode_request(Api.SASL_HANDSHAKE, 1, mechanism="GSSAPI"))[4:])
    assert isinstance(outcome, Respond) and outcome.close_after_response
    answer = decode_response(Api.SASL_HANDSHAKE, 1, memoryview(outcome.response)[8:])
    assert answer.error_code == UNSUPPORTED_SASL_MECHANISM


def refused_here(outcome: object) -> str:
    """The error message of a login the inspector refused itself (nothing forwarded, the connection to close)."""
    if not isinstance(outcome, Outcome):
        outcome = asyncio.run(outcome)  # type: ignore[arg-type]
    assert isinstance(outcome, Respond) and outcome.close_after_response
    answer = decode_response(Api.SASL_AUTHENTICATE, 2, memoryview(outcome.response)[9:])
    assert answer.error_code == SASL_AUTHENTICATION_FAILED
    return str(answer.error_message)


def scram_first_with(extension: str) -> bytes:
    return ScramClient("SCRAM-SHA-256", "token-1", "hmac").first_message() + extension.encode()


@pytest.mark.parametrize("extension", [",tokenauth=true", ",tokenauth=TRUE"])  # Boolean.parseBoolean, as Kafka
def test_a_delegation_token_login_is_charged_to_the_tokens_owner(extension: str) -> None:
    tokens = KnownTokens({"token-1": "alice"})
    inspect = inspector(tokens=tokens)
    (first,) = authenticate(inspect, "SCRAM-SHA-256", scram_first_with(extension))
    cluster_answers(first, 0, b"r=...,s=...,i=4096")
    pending = inspect.handle(memoryview(encode_request(Api.SASL_AUTHENTICATE, 2, auth_bytes=b"c=biws,r=...,p=..."))[4:])
    final = asyncio.run(pending) if not isinstance(pending, Outcome) else pending  # type: ignore[arg-type]
    assert tokens.asked == ["token-1"] and isinstance(final, Forward)
    assert not inspect.done
    cluster_answers(final, 0, b"v=...")
    assert inspect.user == "alice"


def test_a_login_the_proxy_cannot_name_is_refused_never_anonymous() -> None:
    unknown_token = inspector()
    (first,) = authenticate(unknown_token, "SCRAM-SHA-256", scram_first_with(",tokenauth=true"))
    cluster_answers(first, 0, b"r=...,s=...,i=4096")
    message = refused_here(unknown_token.handle(memoryview(
        encode_request(Api.SASL_AUTHENTICATE, 2, auth_bytes=b"c=biws,r=...,p=..."))[4:]))
    assert "owner of delegation token 'token-1' cannot be learnt: no token" in message and unknown_token.refused
    for mechanism, token, why in (("SCRAM-SHA-256", b"n,,r=nonce", "expected n=user,r=nonce"),
                                  ("SCRAM-SHA-256", scram_first_with(",ext=1"), "unsupported SCRAM extensions ext"),
                                  ("PLAIN", b"only-one-part", "invalid PLAIN message"),
                                  ("OAUTHBEARER", unsecured_jwt({"exp": time.time()}), "no 'sub' claim")):
        inspect = inspector()
        forwarded(inspect, Api.SASL_HANDSHAKE, 1, mechanism=mechanism)
        message = refused_here(inspect.handle(memoryview(encode_request(Api.SASL_AUTHENTICATE, 2,
                                                                        auth_bytes=token))[4:]))
        assert why in message and inspect.refused and not inspect.done, (mechanism, message)
