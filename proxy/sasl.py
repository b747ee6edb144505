"""SASL terminated at the proxy: PLAIN and SCRAM-SHA-256/512 (RFC 5802, RFC 7677).

The users file (TOML) keeps, per user and mechanism, only what a server needs to verify a
password: for SCRAM the salt, iteration count, StoredKey and ServerKey; for PLAIN a salted
PBKDF2 hash. Never the password. ``SaslServer`` runs one connection's exchange as Kafka's
``SaslServerAuthenticator`` does: SaslHandshake (v1) names the mechanism, SaslAuthenticate
frames carry the tokens, a failure is answered with SASL_AUTHENTICATION_FAILED and the
connection closes, and any other request before success (except ApiVersions) closes it.
``ScramClient`` and ``plain_token`` are the client side, for the proxy's own upstream login.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocator.durable import write_durably
from protocol.apis import Api
from protocol.codecs import decode_request, encode_response
from protocol.errors import ProtocolError
from protocol.header import RequestHeader, read_request_header
from proxy.outcome import FORWARD, Outcome, local_answer
from proxy.toml_file import read_toml

PLAIN = "PLAIN"
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = (PLAIN, *SCRAM_HASHES)
DEFAULT_ITERATIONS = {PLAIN: 100_000, "SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 8192}
MIN_SCRAM_ITERATIONS = 4096  # RFC 7677 and Kafka's ScramMechanism minimum

SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
_AUTH_FAILED_MESSAGE = "Authentication failed: Invalid username or password"


class SaslConfigError(ValueError):
    """The users file or an upstream credential setting is invalid; the message says where."""


# ---- credentials ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@dataclass(frozen=True)
class PlainCredential:
    salt: bytes
    iterations: int
    hash: bytes

    def matches(self, password: str) -> bool:
        computed = hashlib.pbkdf2_hmac("sha256", password.encode(), self.salt, self.iterations)
        return hmac.compare_digest(computed, self.hash)


Credential = ScramCredential | PlainCredential


def scram_credential(mechanism: str, password: str, iterations: int | None = None,
                     salt: bytes | None = None) -> ScramCredential:
    digest = SCRAM_HASHES[mechanism]
    iterations = iterations or DEFAULT_ITERATIONS[mechanism]
    salt = salt or secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(digest, _saslprep(password), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", digest)
    return ScramCredential(salt, iterations, hashlib.new(digest, client_key).digest(),
                           hmac.digest(salted, b"Server Key", digest))


def plain_credential(password: str, iterations: int | None = None) -> PlainCredential:
    salt = secrets.token_bytes(16)
    iterations = iterations or DEFAULT_ITERATIONS[PLAIN]
    return PlainCredential(salt, iterations, hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations))


def _saslprep(password: str) -> bytes:
    # Full SASLprep (RFC 4013) maps and forbids rare code points; Kafka's Java clients send the
    # UTF-8 bytes as they are, which is what this proxy verifies against.
    return password.encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: Any, where: str) -> bytes:
    try:
        return base64.b64decode(str(text), validate=True)
    except ValueError as error:
        raise SaslConfigError(f"{where}: not base64: {error}") from None


class UserStore:
    """user -> mechanism -> credential, read from the users file."""

    def __init__(self, users: Mapping[str, Mapping[str, Credential]]) -> None:
        self.users = {name: dict(mechanisms) for name, mechanisms in users.items()}

    def credential(self, user: str, mechanism: str) -> Credential | None:
        return self.users.get(user, {}).get(mechanism)

    @property
    def mechanisms(self) -> list[str]:
        """Mechanisms enabled: those at least one user has a credential for, in a fixed order."""
        present = {mechanism for mechanisms in self.users.values() for mechanism in mechanisms}
        return [mechanism for mechanism in MECHANISMS if mechanism in present]


def load_users(path: Path) -> UserStore:
    document = read_toml(path, SaslConfigError)
    unknown = set(document) - {"users"}
    if unknown:
        raise SaslConfigError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}")
    users: dict[str, dict[str, Credential]] = {}
    for name, mechanisms in document.get("users", {}).items():
        if not isinstance(mechanisms, dict) or not mechanisms:
            raise SaslConfigError(f"{path}: users.{name}: needs a table per mechanism")
        for mechanism, fields in mechanisms.items():
            where = f"{path}: users.{name}.{mechanism}"
            if mechanism not in MECHANISMS:
                raise SaslConfigError(f"{where}: unknown mechanism (one of {', '.join(MECHANISMS)})")
            users.setdefault(name, {})[mechanism] = _credential(mechanism, fields, where)
    return UserStore(users)


def _credential(mechanism: str, fields: Any, where: str) -> Credential:
    needed = ("salt", "iterations", "hash") if mechanism == PLAIN else (
        "salt", "iterations", "stored_key", "server_key")
    if not isinstance(fields, dict) or set(fields) != set(needed):
        raise SaslConfigError(f"{where}: needs exactly {', '.join(needed)}")
    iterations = fields["iterations"]
    minimum = 1 if mechanism == PLAIN else MIN_SCRAM_ITERATIONS
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < minimum:
        raise SaslConfigError(f"{where}: iterations must be a whole number >= {minimum}")
    salt = _unb64(fields["salt"], where)
    if mechanism == PLAIN:
        return PlainCredential(salt, iterations, _unb64(fields["hash"], where))
    return ScramCredential(salt, iterations, _unb64(fields["stored_key"], where),
                           _unb64(fields["server_key"], where))


def _credential_fields(credential: Credential) -> dict[str, str | int]:
    if isinstance(credential, PlainCredential):
        return {"salt": _b64(credential.salt), "iterations": credential.iterations, "hash": _b64(credential.hash)}
    return {"salt": _b64(credential.salt), "iterations": credential.iterations,
            "stored_key": _b64(credential.stored_key), "server_key": _b64(credential.server_key)}


def save_users(path: Path, store: UserStore) -> None:
    """Write the users file atomically, readable by its owner only."""
    lines = ["# kafka-quota-proxy users (written by `kafka-quota-proxy users add`)"]
    for name in sorted(store.users):
        for mechanism in MECHANISMS:
            credential = store.users[name].get(mechanism)
            if credential is None:
                continue
            lines += ["", f"[users.{json.dumps(name)}.{mechanism}]"]
            lines += [f"{key} = {json.dumps(value)}" for key, value in _credential_fields(credential).items()]
    write_durably(path, ("\n".join(lines) + "\n").encode(), mode=0o600)


# ---- the server side ----------------------------------------------------------------------------

class AuthenticationFailed(Exception):
    pass


class _ScramExchange:
    """RFC 5802 server: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, store: UserStore) -> None:
        self._digest = SCRAM_HASHES[mechanism]
        self._mechanism = mechanism
        self._store = store
        self._credential: ScramCredential | None = None
        self._auth_message_start = ""
        self._nonce = ""
        self._gs2_header = ""
        self.user: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM message is not UTF-8") from None
        if self._credential is None:
            return self._client_first(text)
        return self._client_final(text)

    def _client_first(self, text: str) -> bytes:
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
            raise AuthenticationFailed("invalid SCRAM client-first message (channel binding is not supported)")
        self._gs2_header = f"{parts[0]},{parts[1]},"
        bare = parts[2]
        attributes = _scram_attributes(bare)
        if "n" not in attributes or "r" not in attributes or set(attributes) - {"n", "r"}:
            raise AuthenticationFailed("invalid SCRAM client-first message (extensions are not supported)")
        user = attributes["n"].replace("=2C", ",").replace("=3D", "=")
        credential = self._store.credential(user, self._mechanism)
        if not isinstance(credential, ScramCredential):
            raise AuthenticationFailed(_AUTH_FAILED_MESSAGE)
        self._credential = credential
        self.user = user
        self._nonce = attributes["r"] + secrets.token_urlsafe(24)
        server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._auth_message_start = f"{bare},{server_first}"
        return server_first.encode()

    def _client_final(self, text: str) -> bytes:
        if self.complete:
            raise AuthenticationFailed("SCRAM exchange already complete")
        assert self._credential is not None
        without_proof, separator, proof_text = text.rpartition(",p=")
        attributes = _scram_attributes(without_proof) if separator else {}
        if attributes.get("r") != self._nonce:
            raise AuthenticationFailed("invalid SCRAM client-final message (nonce mismatch)")
        if attributes.get("c") != _b64(self._gs2_header.encode()):
            raise AuthenticationFailed("invalid SCRAM client-final message (channel binding mismatch)")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise AuthenticationFailed("invalid SCRAM proof") from None
        auth_message = f"{self._auth_message_start},{without_proof}".encode()
        credential = self._credential
        client_signature = hmac.digest(credential.stored_key, auth_message, self._digest)
        if len(proof) != len(client_signature):
            raise AuthenticationFailed(_AUTH_FAILED_MESSAGE)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._digest, client_key).digest(), credential.stored_key):
            raise AuthenticationFailed(_AUTH_FAILED_MESSAGE)
        self.complete = True
        return f"v={_b64(hmac.digest(credential.server_key, auth_message, self._digest))}".encode()


def _scram_attributes(message: str) -> dict[str, str]:
    attributes = {}
    for part in message.split(","):
        name, separator, value = part.partition("=")
        if not separator or len(name) != 1:
            raise AuthenticationFailed(f"invalid SCRAM attribute {part!r}")
        attributes[name] = value
    return attributes


class _PlainExchange:
    def __init__(self, store: UserStore) -> None:
        self._store = store
        self.user: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("invalid PLAIN message")
        try:
            authorization_id, user, password = (part.decode() for part in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN message is not UTF-8") from None
        if authorization_id and authorization_id != user:
            raise AuthenticationFailed("PLAIN authorization id must be empty or the user")
        credential = self._store.credential(user, PLAIN)
        if not isinstance(credential, PlainCredential) or not credential.matches(password):
            raise AuthenticationFailed(_AUTH_FAILED_MESSAGE)
        self.user = user
        self.complete = True
        return b""


_FIRST_FRAMED_HANDSHAKE_VERSION = 1  # v0 is followed by unframed tokens, which this proxy does not take


class SaslServer:
    """One connection's SASL state; ``user`` is set once authentication has succeeded."""

    def __init__(self, store: UserStore) -> None:
        self._store = store
        self._exchange: _ScramExchange | _PlainExchange | None = None
        self.user: str | None = None

    @property
    def done(self) -> bool:
        return self.user is not None

    def handle(self, frame: memoryview) -> Outcome:
        header = read_request_header(frame)
        api_key, version = header.api_key, header.api_version
        if api_key == Api.API_VERSIONS and not self.done:
            return FORWARD
        if api_key not in (Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE):
            raise ProtocolError("request before SASL authentication completed", api_key=api_key,
                                api_version=version, offset=0)
        request = decode_request(api_key, version, frame[header.length:])
        if api_key == Api.SASL_HANDSHAKE:
            return self._handshake(header, request.mechanism)
        return self._authenticate(header, bytes(request.auth_bytes))

    def _handshake(self, header: RequestHeader, mechanism: str) -> Outcome:
        enabled = self._store.mechanisms
        if self.done or self._exchange is not None:
            body = encode_response(Api.SASL_HANDSHAKE, header.api_version,
                                   {"error_code": ILLEGAL_SASL_STATE, "mechanisms": enabled})
            return local_answer(header, body, close_after_response=True)
        if header.api_version < _FIRST_FRAMED_HANDSHAKE_VERSION:
            raise ProtocolError("SaslHandshake v0 (unframed SASL tokens) is not supported",
                                api_key=header.api_key, api_version=header.api_version, offset=0)
        if mechanism not in enabled:
            body = encode_response(Api.SASL_HANDSHAKE, header.api_version,
                                   {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled})
            return local_answer(header, body, close_after_response=True)
        self._exchange = _PlainExchange(self._store) if mechanism == PLAIN else _ScramExchange(mechanism, self._store)
        body = encode_response(Api.SASL_HANDSHAKE, header.api_version, {"error_code": 0, "mechanisms": enabled})
        return local_answer(header, body)

    def _authenticate(self, header: RequestHeader, token: bytes) -> Outcome:
        exchange = self._exchange
        if exchange is None or self.done:
            return self._auth_answer(header, ILLEGAL_SASL_STATE, "SaslAuthenticate before a SaslHandshake", b"",
                                     close=True)
        try:
            reply = exchange.step(token)
        except AuthenticationFailed as failure:
            return self._auth_answer(header, SASL_AUTHENTICATION_FAILED, str(failure), b"", close=True)
        if exchange.complete:
            self.user = exchange.user
        return self._auth_answer(header, 0, None, reply, close=False)

    @staticmethod
    def _auth_answer(header: RequestHeader, error_code: int, message: str | None, reply: bytes, close: bool) -> Outcome:
        body = encode_response(Api.SASL_AUTHENTICATE, header.api_version,
                               {"error_code": error_code, "error_message": message, "auth_bytes": reply,
                                "session_lifetime_ms": 0})
        return local_answer(header, body, close_after_response=close)


# ---- the client side (the proxy's own upstream login) ------------------------------------------

class ScramClient:
    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self._digest = SCRAM_HASHES[mechanism]
        self._password = password
        self._nonce = secrets.token_urlsafe(24)
        escaped = user.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={escaped},r={self._nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attributes = _scram_attributes(text)
        nonce, salt, iterations = attributes.get("r", ""), attributes.get("s", ""), attributes.get("i", "")
        if not nonce.startswith(self._nonce) or not iterations.isdigit():
            raise AuthenticationFailed("invalid SCRAM server-first message")
        salted = hashlib.pbkdf2_hmac(self._digest, _saslprep(self._password), base64.b64decode(salt), int(iterations))
        client_key = hmac.digest(salted, b"Client Key", self._digest)
        stored_key = hashlib.new(self._digest, client_key).digest()
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self._digest)
        self._server_signature = hmac.digest(server_key, auth_message, self._digest)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify_server(self, server_final: bytes) -> None:
        expected = f"v={_b64(self._server_signature)}".encode()
        if not hmac.compare_digest(server_final, expected):
            raise AuthenticationFailed("the upstream's SCRAM server signature does not match")


def plain_token(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()
