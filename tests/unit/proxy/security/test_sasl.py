from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.errors import ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ProtocolError
from proxy.decision.outcome import Outcome, Respond
from proxy.security import users
from proxy.security.oauthbearer import OAuthBearerSettings, TokenValidator, UnsecuredJwtValidator
from proxy.security.sasl import LoginSettings, SaslServer, verify_plain
from proxy.security.sasl_messages import AuthenticationFailed, ScramClient, plain_token
from proxy.security.users import (
    DEFAULT_ITERATIONS,
    PLAIN,
    SaslConfigError,
    UserStore,
    load_users,
    plain_credential,
    save_users,
    scram_credential,
)
from tests.support import encode_request
from tests.unit.proxy.outcomes import answered

STORE = UserStore({
    "alice": {"SCRAM-SHA-512": scram_credential("SCRAM-SHA-512", "secret", 4096)},
    "carol": {"SCRAM-SHA-256": scram_credential("SCRAM-SHA-256", "pa,ss=word", 4096)},
    "bob": {"PLAIN": plain_credential("hunter2", 1000)},
})


class CountedLogins:
    def __init__(self) -> None:
        self.ended: list[tuple[str, bool]] = []

    def login_ended(self, mechanism: str, succeeded: bool) -> None:
        self.ended.append((mechanism, succeeded))


POOL = ThreadPoolExecutor(1)
NO_DELAY = LoginSettings(failed_delay_s=0)


def new_server(settings: LoginSettings = NO_DELAY, store: UserStore | None = STORE,
               tokens: TokenValidator | None = None) -> SaslServer:
    return SaslServer(store, tokens, settings, POOL, "10.0.0.9:4242", CountedLogins())


def ask(server: SaslServer, api_key: int, version: int, **fields: object) -> tuple[Respond, object]:
    decided = server.handle(memoryview(encode_request(api_key, version, **fields))[4:])
    outcome = answered(decided if isinstance(decided, Outcome) else asyncio.run(settle(decided)))
    frame = outcome.response[4:]
    header_length = 5 if version >= 2 and api_key == Api.SASL_AUTHENTICATE else 4
    return outcome, decode_response(api_key, version, frame[header_length:])


async def settle(decided: Awaitable[Outcome]) -> Outcome:
    return await decided


def scram_login(mechanism: str, user: str, password: str,
                server: SaslServer | None = None) -> tuple[SaslServer, Outcome, object]:
    server = server or new_server()
    _, handshake = ask(server, Api.SASL_HANDSHAKE, 1, mechanism=mechanism)
    assert handshake.error_code == 0  # type: ignore[attr-defined]
    client = ScramClient(mechanism, user, password)
    _, first = ask(server, Api.SASL_AUTHENTICATE, 1, auth_bytes=client.first_message())
    assert first.error_code == 0  # type: ignore[attr-defined]
    outcome, final = ask(server, Api.SASL_AUTHENTICATE, 1,
                         auth_bytes=client.final_message(bytes(first.auth_bytes)))  # type: ignore[attr-defined]
    if not final.error_code:  # type: ignore[attr-defined]
        client.verify_server(bytes(final.auth_bytes))  # type: ignore[attr-defined]
    return server, outcome, final


@pytest.mark.parametrize(("mechanism", "user", "password"), [("SCRAM-SHA-512", "alice", "secret"),
                                                             ("SCRAM-SHA-256", "carol", "pa,ss=word")])
def test_scram_login(mechanism: str, user: str, password: str) -> None:
    server, outcome, final = scram_login(mechanism, user, password)
    assert final.error_code == 0  # type: ignore[attr-defined]
    assert server.done and server.user == user
    assert not outcome.close_after_response


def test_scram_refuses_a_wrong_password_and_closes() -> None:
    server, outcome, final = scram_login("SCRAM-SHA-512", "alice", "wrong")
    assert final.error_code == SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
    assert outcome.close_after_response and not server.done


def test_a_delegation_token_login_is_refused_here_where_no_token_is_held() -> None:
    server = new_server()
    ask(server, Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
    first = ScramClient("SCRAM-SHA-512", "token-id", "hmac").first_message() + b",tokenauth=true"
    outcome, answer = ask(server, Api.SASL_AUTHENTICATE, 2, auth_bytes=first)
    assert answer.error_code == SASL_AUTHENTICATION_FAILED and outcome.close_after_response  # type: ignore[attr-defined]
    assert "tokenauth" in answer.error_message  # type: ignore[attr-defined]


def test_scram_offers_an_unknown_user_a_stable_made_up_salt_and_refuses_it_at_the_proof() -> None:
    salts = []
    for _ in range(2):
        server = new_server()
        ask(server, Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
        client = ScramClient("SCRAM-SHA-512", "nobody", "secret")
        _, first = ask(server, Api.SASL_AUTHENTICATE, 1, auth_bytes=client.first_message())
        assert first.error_code == 0  # type: ignore[attr-defined]
        salts.append(bytes(first.auth_bytes).split(b",s=")[1].split(b",")[0])  # type: ignore[attr-defined]
        outcome, final = ask(server, Api.SASL_AUTHENTICATE, 1,
                             auth_bytes=client.final_message(bytes(first.auth_bytes)))  # type: ignore[attr-defined]
        assert final.error_code == SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
        assert outcome.close_after_response and not server.done
    assert salts[0] == salts[1]


def test_an_authorization_id_other_than_the_user_is_refused() -> None:
    server = new_server()
    ask(server, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    outcome, answer = ask(server, Api.SASL_AUTHENTICATE, 2, auth_bytes=b"admin\x00bob\x00hunter2")
    assert answer.error_code == SASL_AUTHENTICATION_FAILED and outcome.close_after_response  # type: ignore[attr-defined]
    server = new_server()
    ask(server, Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
    outcome, first = ask(server, Api.SASL_AUTHENTICATE, 1, auth_bytes=b"n,a=admin,n=alice,r=abcdef")
    assert first.error_code == SASL_AUTHENTICATION_FAILED and outcome.close_after_response  # type: ignore[attr-defined]


def test_plain_login_and_refusal() -> None:
    server = new_server()
    ask(server, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    outcome, answer = ask(server, Api.SASL_AUTHENTICATE, 2, auth_bytes=plain_token("bob", "hunter2"))
    assert answer.error_code == 0 and server.user == "bob"  # type: ignore[attr-defined]
    server = new_server()
    ask(server, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    outcome, answer = ask(server, Api.SASL_AUTHENTICATE, 2, auth_bytes=plain_token("bob", "hunter3"))
    assert answer.error_code == SASL_AUTHENTICATION_FAILED and outcome.close_after_response  # type: ignore[attr-defined]


def test_a_failure_is_answered_after_the_delay_and_counted() -> None:
    server = new_server(LoginSettings(failed_delay_s=0.2))
    ask(server, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    started = time.perf_counter()
    outcome, answer = ask(server, Api.SASL_AUTHENTICATE, 2, auth_bytes=plain_token("bob", "hunter3"))
    assert time.perf_counter() - started >= 0.2
    assert answer.error_code == SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
    assert server._events.ended == [("PLAIN", False)]  # type: ignore[attr-defined]


def test_an_unknown_plain_user_costs_the_hash_a_known_one_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same PBKDF2 (digest and iterations) runs for both, so their times match: asserted on the hashes run,
    which a wall-clock comparison on a busy machine cannot tell apart from noise."""
    store = UserStore({"dave": {"PLAIN": plain_credential("right")}})  # the default iterations
    pbkdf2 = hashlib.pbkdf2_hmac

    def hashes_run(token: bytes) -> list[tuple[str, int]]:
        run: list[tuple[str, int]] = []

        def counted(digest: str, password: bytes, salt: bytes, iterations: int) -> bytes:
            run.append((digest, iterations))
            return pbkdf2(digest, password, salt, iterations)

        with monkeypatch.context() as patch:
            patch.setattr(users.hashlib, "pbkdf2_hmac", counted)
            with pytest.raises(AuthenticationFailed):
                verify_plain(store, token)
        return run

    known = hashes_run(plain_token("dave", "wrong"))
    assert known == [("sha256", DEFAULT_ITERATIONS[PLAIN])]
    assert hashes_run(plain_token("nobody", "wrong")) == known


def unsecured_jwt(claims: dict[str, object], alg: str = "none", signature: str = "") -> bytes:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"n,,\x01auth=Bearer {part({'alg': alg})}.{part(claims)}.{signature}\x01\x01".encode()


def test_oauthbearer_unsecured_jwts_when_enabled() -> None:
    tokens = UnsecuredJwtValidator(OAuthBearerSettings(unsecured_jwt=True))
    expiry = time.time() + 60
    for token, user in ((unsecured_jwt({"sub": "erin", "exp": expiry}), "erin"),
                        (unsecured_jwt({"sub": "erin", "exp": time.time() - 1}), None),
                        (unsecured_jwt({"exp": expiry}), None),
                        (unsecured_jwt({"sub": "erin", "exp": expiry}, "HS256", "c2ln"), None)):
        server = new_server(tokens=tokens)
        _, handshake = ask(server, Api.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER")
        assert handshake.error_code == 0  # type: ignore[attr-defined]
        _, answer = ask(server, Api.SASL_AUTHENTICATE, 2, auth_bytes=token)
        assert server.user == user and (answer.error_code == 0) is (user is not None)  # type: ignore[attr-defined]
    _, handshake = ask(new_server(), Api.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER")
    assert handshake.error_code == UNSUPPORTED_SASL_MECHANISM  # type: ignore[attr-defined]


def test_handshake_errors_and_requests_before_login() -> None:
    outcome, handshake = ask(new_server(), Api.SASL_HANDSHAKE, 1, mechanism="GSSAPI")
    assert handshake.error_code == UNSUPPORTED_SASL_MECHANISM and outcome.close_after_response  # type: ignore[attr-defined]
    assert handshake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]  # type: ignore[attr-defined]
    outcome, answer = ask(new_server(), Api.SASL_AUTHENTICATE, 1, auth_bytes=b"x")
    assert answer.error_code == ILLEGAL_SASL_STATE and outcome.close_after_response  # type: ignore[attr-defined]
    with pytest.raises(ProtocolError, match="before SASL authentication"):
        new_server().handle(memoryview(encode_request(Api.METADATA, 4, topics=[],
                                                      allow_auto_topic_creation=False))[4:])


def test_scram_client_detects_a_forged_server_signature() -> None:
    client = ScramClient("SCRAM-SHA-256", "carol", "pa,ss=word")
    salt = base64.b64encode(b"0123456789abcdef").decode()
    client.final_message(f"r={client.first_message().decode().split('r=')[1]}xyz,s={salt},i=4096".encode())
    with pytest.raises(AuthenticationFailed):
        client.verify_server(b"v=" + base64.b64encode(b"\0" * 32))


def test_users_file_round_trip_keeps_no_password(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    save_users(path, STORE)
    text = path.read_text()
    assert "secret" not in text and "hunter2" not in text
    assert path.stat().st_mode & 0o777 == 0o600
    loaded = load_users(path)
    assert loaded.users == STORE.users



@pytest.mark.parametrize("name", ["dev-\U0001F600", 'quote"back\\slash', "tab\tand\u00e9", "a.b"])
def test_users_file_keeps_any_user_name_toml_can_hold(tmp_path: Path, name: str) -> None:
    """JSON writes a character beyond the Basic Multilingual Plane as a surrogate pair, which TOML refuses."""
    path = tmp_path / "users.toml"
    store = UserStore({name: {"PLAIN": plain_credential("pw", 1000)}})
    save_users(path, store)
    assert load_users(path).users == store.users

@pytest.mark.parametrize(("text", "message"), [
    ('[users.a.KERBEROS]\nsalt = ""\n', "unknown mechanism"),
    ('[users.a.PLAIN]\nsalt = "AA=="\niterations = 5\n', "needs exactly"),
    ('[users.a.SCRAM-SHA-256]\nsalt = "AA=="\niterations = 10\nstored_key = "AA=="\nserver_key = "AA=="\n',
     "iterations must be"),
    ('[users.a.PLAIN]\nsalt = "!!"\niterations = 5\nhash = "AA=="\n', "not base64"),
    ("x = 1\n", "unknown top-level"),
])
def test_bad_users_files_are_refused_with_the_place(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "users.toml"
    path.write_text(text)
    with pytest.raises(SaslConfigError, match=message):
        load_users(path)
