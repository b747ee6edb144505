"""Signed OAUTHBEARER tokens checked as Kafka's ``BrokerJwtValidator`` checks them, on a fake clock."""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import os
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from protocol.apis import Api
from proxy.security.oauthbearer import (
    JwksEndpoint,
    JwksError,
    JwksFile,
    OAuthBearerSettings,
    SignedJwtValidator,
    VerificationKey,
    parse_jwks,
)
from proxy.security.sasl_messages import AuthenticationFailed, parse_oauthbearer_token
from tests.unit.proxy.security.test_sasl import NO_DELAY, ask, new_server

NOW = 1_800_000_000
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(private: Any, kid: str, **extra: str) -> dict[str, Any]:
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(private, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    return {**json.loads(algorithm.to_jwk(private.public_key())), "kid": kid, **extra}


JWKS = {"keys": [public_jwk(RSA_KEY, "rsa-1"), public_jwk(EC_KEY, "ec-1")]}


def claims(**overrides: Any) -> dict[str, Any]:
    base = {"sub": "alice", "iat": NOW - 10, "exp": NOW + 300, "iss": "https://issuer.example",
            "aud": "kafka", "scope": "produce consume"}
    return {key: value for key, value in {**base, **overrides}.items() if value is not None}


def signed(private: Any = RSA_KEY, kid: str | None = "rsa-1", algorithm: str = "RS256", **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), private, algorithm=algorithm, headers={} if kid is None else {"kid": kid})


def part(*values: dict[str, Any]) -> list[str]:
    return [base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=") for value in values]


def message(token: str, authorization_id: str = "") -> bytes:
    gs2 = f"n,a={authorization_id}," if authorization_id else "n,,"
    return f"{gs2}\x01auth=Bearer {token}\x01\x01".encode()


class StaticKeys:
    def __init__(self, document: dict[str, Any]) -> None:
        self.keys = parse_jwks(json.dumps(document).encode(), "test")
        self.missing: list[str] = []

    def verification_keys(self) -> list[VerificationKey]:
        return self.keys

    def key_missing(self, key_id: str) -> None:
        self.missing.append(key_id)


def validator(now: float = NOW, document: dict[str, Any] = JWKS, **settings: Any) -> SignedJwtValidator:
    chosen = {"jwks_endpoint_url": "file:///unused", "expected_audience": ("kafka",),
              "expected_issuer": "https://issuer.example", **settings}
    return SignedJwtValidator(OAuthBearerSettings(**chosen), StaticKeys(document), clock=lambda: now)


def principal(token: str, check: SignedJwtValidator | None = None, authorization_id: str = "") -> str:
    return (check or validator()).principal(parse_oauthbearer_token(message(token, authorization_id)))


def refused(token: str, check: SignedJwtValidator | None = None, match: str = "", authorization_id: str = "") -> None:
    with pytest.raises(AuthenticationFailed, match=match):
        principal(token, check, authorization_id)


def test_rs256_and_es256_tokens_name_their_subject() -> None:
    assert principal(signed()) == "alice"
    assert principal(signed(EC_KEY, "ec-1", "ES256", sub=" bob ")) == "bob"  # trimmed, as Kafka trims it
    assert principal(signed(kid=None)) == "alice"  # one key verifies RS256: no kid needed
    assert principal(signed(EC_KEY, None, "ES256")) == "alice"
    for algorithm in ("PS256", "RS512"):  # an RSA key whose entry names no alg verifies any RSA algorithm
        assert principal(signed(algorithm=algorithm)) == "alice"
    refused(signed(algorithm="RS256").replace(signed().split(".")[0], part({"alg": ["RS256"], "kid": "rsa-1"})[0]),
            match="not accepted")  # a malformed alg is a refusal, not an error of the connection


def test_expiry_and_not_before_allow_the_clock_skew_as_jose4j_does() -> None:
    token = signed(exp=NOW + 300)
    assert principal(token, validator(now=NOW + 329)) == "alice"
    refused(token, validator(now=NOW + 330), "expired")
    refused(token, validator(now=NOW + 300, clock_skew_s=0), "expired")
    assert principal(signed(nbf=NOW + 30)) == "alice"
    refused(signed(nbf=NOW + 31), match="not valid before")


def test_exp_and_iat_are_required_and_numeric() -> None:
    refused(signed(exp=None), match="exp")
    refused(signed(iat=None), match="iat")
    refused(signed(iat=-1), match="numeric")
    assert principal(signed(iat=NOW + 3600)) == "alice"  # jose4j sets no limit on an iat to come


def test_issuer_and_audience_when_expected_and_any_when_not() -> None:
    refused(signed(iss="https://other.example"), match="issuer")
    refused(signed(iss=None), match="iss")
    refused(signed(aud="billing"), match="[Aa]udience")
    refused(signed(aud=None), match="aud")
    assert principal(signed(aud=["billing", "kafka"])) == "alice"
    unset = validator(expected_audience=(), expected_issuer=None)
    assert principal(signed(aud=None, iss="https://other.example"), unset) == "alice"
    assert principal(signed(aud=None, iss=None), unset) == "alice"
    # jose4j's default AudValidator, which Kafka keeps: without an expected audience a token naming one is refused
    refused(signed(aud="billing"), unset, "[Aa]udience")


def test_unknown_keys_unsigned_and_tampered_tokens_are_refused() -> None:
    check = validator()
    refused(signed(OTHER_RSA_KEY, "rsa-2"), check, "no key 'rsa-2'")
    assert check._key_set.missing == ["rsa-2"]  # type: ignore[attr-defined]
    refused(signed(OTHER_RSA_KEY, "rsa-1"), match="[Ss]ignature")
    header, body, signature = signed().split(".")
    [forged] = part(claims(sub="mallory"))
    refused(f"{header}.{forged}.{signature}", match="[Ss]ignature")
    refused(f"{header}.{body}.{signature[:-4]}AAAA", match="[Ss]ignature")
    unsigned = ".".join(part({"alg": "none"}, claims())) + "."
    refused(unsigned, match="'none' is not accepted")
    pem = RSA_KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    head_and_body = ".".join(part({"alg": "HS256", "kid": "rsa-1"}, claims()))
    mac = hmac.digest(pem, head_and_body.encode(), "sha256")
    refused(f"{head_and_body}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}",
            match="'HS256' is not accepted")  # the public key taken for an HMAC secret


def test_a_key_declaring_its_algorithm_or_use_verifies_nothing_else() -> None:
    document = {"keys": [public_jwk(RSA_KEY, "rsa-1", alg="PS256"), public_jwk(EC_KEY, "ec-1", use="enc")]}
    refused(signed(), validator(document=document), "no key")
    assert principal(signed(algorithm="PS256"), validator(document=document)) == "alice"
    refused(signed(EC_KEY, "ec-1", "ES256"), validator(document=document), "no key")
    two = {"keys": [public_jwk(RSA_KEY, "rsa-1"), public_jwk(OTHER_RSA_KEY, "rsa-2")]}
    refused(signed(kid=None), validator(document=two), "2 keys")


def test_the_scope_and_subject_claims_are_checked_as_kafka_checks_them() -> None:
    refused(signed(scope=["produce", "produce"]), match="duplicates")
    refused(signed(scope=["produce", " "]), match="non-empty")
    assert principal(signed(scope=["produce", "consume"])) == "alice"
    assert principal(signed(scope=None)) == "alice"
    refused(signed(sub=None), match="'sub'")
    refused(signed(sub="  "), match="'sub'")
    refused(signed(sub=42), match="[Ss]ub")
    assert principal(signed(upn="carol"), validator(sub_claim_name="upn")) == "carol"
    assert principal(signed(), authorization_id="alice") == "alice"
    refused(signed(), match="authorization id", authorization_id="bob")


def test_the_proxy_offers_oauthbearer_alone_when_it_has_no_users() -> None:
    server = new_server(NO_DELAY, store=None, tokens=validator())
    _, handshake = ask(server, Api.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER")
    assert handshake.mechanisms == ["OAUTHBEARER"]  # type: ignore[attr-defined]


def test_a_jwks_file_is_read_again_when_it_changes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public_jwk(RSA_KEY, "rsa-1")]}))
    keys = JwksFile(path)
    assert [key.key_id for key in keys.verification_keys()] == ["rsa-1"]
    path.write_text(json.dumps({"keys": [public_jwk(EC_KEY, "ec-1")]}))
    os.utime(path, ns=(1, 1))
    assert [key.key_id for key in keys.verification_keys()] == ["ec-1"]
    path.write_text("{not json")
    os.utime(path, ns=(2, 2))
    assert [key.key_id for key in keys.verification_keys()] == ["ec-1"]  # a bad change keeps what was read
    assert [key.key_id for key in keys.verification_keys()] == ["ec-1"]
    assert sum("not JSON" in record.message for record in caplog.records) == 1  # once, not per login
    path.write_text(json.dumps({"keys": [public_jwk(RSA_KEY, "rsa-1")]}))  # written whole in the same tick
    os.utime(path, ns=(2, 2))
    assert [key.key_id for key in keys.verification_keys()] == ["rsa-1"]  # what could not be read is read again
    path.write_text(json.dumps({"keys": [public_jwk(EC_KEY, "ec-1")]}))
    os.utime(path, ns=(3, 3))
    assert [key.key_id for key in keys.verification_keys()] == ["ec-1"]
    path.unlink()
    assert [key.key_id for key in keys.verification_keys()] == ["ec-1"]
    assert [key.key_id for key in keys.verification_keys()] == ["ec-1"]
    assert sum("No such file" in record.message for record in caplog.records) == 1
    path.write_text(json.dumps({"keys": [public_jwk(RSA_KEY, "rsa-1")]}))
    assert [key.key_id for key in keys.verification_keys()] == ["rsa-1"]  # back: read again
    with pytest.raises(JwksError, match="missing.json"):
        JwksFile(tmp_path / "missing.json")
    (tmp_path / "empty.json").write_text('{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}')
    with pytest.raises(JwksError, match="no public key"):
        JwksFile(tmp_path / "empty.json")


async def fetched_while(condition: Any) -> None:
    """Yield to the fetches in flight until ``condition()`` holds (they run in a thread)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the fetch did not happen")


def test_a_jwks_endpoint_is_fetched_again_when_a_token_names_a_key_it_lacks() -> None:
    clock = [0.0]
    documents = [{"keys": [public_jwk(RSA_KEY, "rsa-1")]}, {"keys": [public_jwk(OTHER_RSA_KEY, "rsa-2")]}]
    fetched: list[str] = []

    def fetch(url: str, timeout_s: float) -> list[VerificationKey]:
        fetched.append(url)
        return parse_jwks(json.dumps(documents[min(len(fetched), 2) - 1]).encode(), url)

    async def scenario() -> None:
        endpoint = JwksEndpoint(OAuthBearerSettings(jwks_endpoint_url="https://idp.example/jwks"), fetch,
                                clock=lambda: clock[0])
        await endpoint.start()
        assert [key.key_id for key in endpoint.verification_keys()] == ["rsa-1"]
        endpoint.key_missing("rsa-2")
        for made_up in range(20):  # made-up ids while the fetch is in flight share it
            endpoint.key_missing(f"made-up-{made_up}")
        await fetched_while(lambda: [key.key_id for key in endpoint.verification_keys()] == ["rsa-2"])
        assert len(fetched) == 2
        endpoint.key_missing("rsa-2")  # asked again within a minute: no fetch
        endpoint.key_missing("x" * 1001)  # too long to be a key id: ignored
        clock[0] = 61
        endpoint.key_missing("rsa-2")
        await fetched_while(lambda: len(fetched) == 3)
        await asyncio.sleep(0.05)
        assert len(fetched) == 3

    asyncio.run(scenario())


def test_a_jwks_endpoint_that_never_answers_stops_the_start() -> None:
    clock = [0.0]

    def fetch(url: str, timeout_s: float) -> list[VerificationKey]:
        clock[0] += 0.03  # each try takes 30 ms of the fake clock
        raise JwksError(f"JWKS endpoint {url}: connection refused")

    settings = OAuthBearerSettings(jwks_endpoint_url="https://idp.example/jwks", jwks_endpoint_retry_backoff_ms=10,
                                   jwks_endpoint_retry_backoff_max_ms=100)
    with pytest.raises(JwksError, match="idp.example"):
        asyncio.run(JwksEndpoint(settings, fetch, clock=lambda: clock[0]).start())
    assert clock[0] == pytest.approx(0.09)  # tries end at 30, 60, 90 ms; 90 + the 40 ms wait passes 100 ms
