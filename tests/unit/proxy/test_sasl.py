from __future__ import annotations

import base64
from pathlib import Path

import pytest

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.errors import ProtocolError
from proxy.outcome import Outcome
from proxy.sasl import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    AuthenticationFailed,
    SaslConfigError,
    SaslServer,
    ScramClient,
    UserStore,
    load_users,
    plain_credential,
    plain_token,
    save_users,
    scram_credential,
)
from tests.support import encode_request

STORE = UserStore({
    "alice": {"SCRAM-SHA-512": scram_credential("SCRAM-SHA-512", "secret", 4096)},
    "carol": {"SCRAM-SHA-256": scram_credential("SCRAM-SHA-256", "pa,ss=word", 4096)},
    "bob": {"PLAIN": plain_credential("hunter2", 1000)},
})


def ask(server: SaslServer, api_key: int, version: int, **fields: object) -> tuple[Outcome, object]:
    outcome = server.handle(memoryview(encode_request(api_key, version, **fields))[4:])
    assert outcome.local_response is not None
    frame = outcome.local_response[4:]
    header_length = 5 if version >= 2 and api_key == Api.SASL_AUTHENTICATE else 4
    return outcome, decode_response(api_key, version, frame[header_length:])


def scram_login(mechanism: str, user: str, password: str) -> tuple[SaslServer, Outcome, object]:
    server = SaslServer(STORE)
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


def test_scram_refuses_an_unknown_user_at_the_first_message() -> None:
    server = SaslServer(STORE)
    ask(server, Api.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-512")
    outcome, first = ask(server, Api.SASL_AUTHENTICATE, 1,
                         auth_bytes=ScramClient("SCRAM-SHA-512", "nobody", "secret").first_message())
    assert first.error_code == SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
    assert outcome.close_after_response and not server.done


def test_plain_login_and_refusal() -> None:
    server = SaslServer(STORE)
    ask(server, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    outcome, answer = ask(server, Api.SASL_AUTHENTICATE, 2, auth_bytes=plain_token("bob", "hunter2"))
    assert answer.error_code == 0 and server.user == "bob"  # type: ignore[attr-defined]
    server = SaslServer(STORE)
    ask(server, Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    outcome, answer = ask(server, Api.SASL_AUTHENTICATE, 2, auth_bytes=plain_token("bob", "hunter3"))
    assert answer.error_code == SASL_AUTHENTICATION_FAILED and outcome.close_after_response  # type: ignore[attr-defined]


def test_handshake_errors_and_requests_before_login() -> None:
    server = SaslServer(STORE)
    outcome, handshake = ask(server, Api.SASL_HANDSHAKE, 1, mechanism="GSSAPI")
    assert handshake.error_code == UNSUPPORTED_SASL_MECHANISM and outcome.close_after_response  # type: ignore[attr-defined]
    assert handshake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]  # type: ignore[attr-defined]
    outcome, answer = ask(SaslServer(STORE), Api.SASL_AUTHENTICATE, 1, auth_bytes=b"x")
    assert answer.error_code == ILLEGAL_SASL_STATE and outcome.close_after_response  # type: ignore[attr-defined]
    assert SaslServer(STORE).handle(memoryview(encode_request(Api.API_VERSIONS, 0))[4:]).forward
    with pytest.raises(ProtocolError, match="before SASL authentication"):
        SaslServer(STORE).handle(memoryview(encode_request(Api.METADATA, 4, topics=[],
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
