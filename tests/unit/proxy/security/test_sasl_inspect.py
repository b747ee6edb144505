from __future__ import annotations

import time

from protocol.apis import Api
from protocol.codecs import decode_response, encode_response
from protocol.errors import UNSUPPORTED_SASL_MECHANISM
from proxy.decision.outcome import Outcome
from proxy.security.oauthbearer import OAuthBearerSettings
from proxy.security.sasl import LoginSettings
from proxy.security.sasl_inspect import SaslInspector
from proxy.security.sasl_messages import ScramClient, plain_token
from tests.support import encode_request
from tests.unit.proxy.security.test_sasl import CountedLogins, unsecured_jwt


def inspector(claim: str = "sub") -> SaslInspector:
    settings = LoginSettings(oauthbearer=OAuthBearerSettings(sub_claim_name=claim))
    return SaslInspector(settings, "10.0.0.9:4242", CountedLogins())


def forwarded(inspect: SaslInspector, api_key: int, version: int, **fields: object) -> Outcome:
    outcome = inspect.handle(memoryview(encode_request(api_key, version, **fields))[4:])
    assert isinstance(outcome, Outcome) and outcome.forward and outcome.local_response is None
    return outcome


def cluster_answers(outcome: Outcome, error_code: int, auth_bytes: bytes = b"") -> None:
    """The cluster's SaslAuthenticate v2 answer, passed through the inspector unchanged."""
    body = encode_response(Api.SASL_AUTHENTICATE, 2, {"error_code": error_code, "error_message": None,
                                                      "auth_bytes": auth_bytes, "session_lifetime_ms": 0})
    assert outcome.finish is not None
    assert outcome.finish(memoryview(body)) == body


def authenticate(inspect: SaslInspector, mechanism: str, *tokens: bytes) -> list[Outcome]:
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
    assert isinstance(outcome, Outcome) and not outcome.forward and outcome.close_after_response
    assert outcome.local_response is not None
    answer = decode_response(Api.SASL_HANDSHAKE, 1, memoryview(outcome.local_response)[8:])
    assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
