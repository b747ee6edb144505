"""SASL terminated at the proxy: PLAIN, SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and, for tests,
OAUTHBEARER with unsigned JWTs (RFC 7628).

The users file (TOML) keeps, per user and mechanism, only what a server needs to verify a
password: for SCRAM the salt, iteration count, StoredKey and ServerKey; for PLAIN a salted
PBKDF2 hash. Never the password. ``SaslServer`` runs one connection's exchange as Kafka's
``SaslServerAuthenticator`` does: SaslHandshake (v1) names the mechanism, SaslAuthenticate
frames carry the tokens, the first failure is answered (late) with SASL_AUTHENTICATION_FAILED and
the connection closes, and any other request before success (except ApiVersions, which the
connection answers) closes it. The token parsers serve ``proxy.sasl_inspect`` too.
``ScramClient`` and ``plain_token`` are the client side, for the proxy's own upstream login.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from allocator.durable import write_durably
from protocol.apis import Api
from protocol.codecs import decode_request, encode_response
from protocol.errors import ProtocolError
from protocol.header import RequestHeader, read_request_header
from proxy.outcome import Decided, Outcome, local_answer
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

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class LoginSettings:
    """How logins are run (``sasl-*`` settings); Kafka's names in the comments."""

    timeout_s: float = 10.0
    """A connection that has not logged in by then is closed."""
    failed_delay_s: float = 0.1
    """``connection.failed.authentication.delay.ms``: a failed login is answered, then closed, this late."""
    max_receive_bytes: int = 512 * 1024
    """``sasl.server.max.receive.size``: the largest frame taken before a login completes."""
    oauthbearer_principal_claim: str = "sub"
    """``sasl.oauthbearer.sub.claim.name``: the JWT claim naming the principal."""
    oauthbearer_unsecured_jwt: bool = False
    """terminate: accept unsigned JWTs (Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``), for tests."""


class LoginEvents(Protocol):
    """Where logins are counted (``/metrics``)."""

    def login_ended(self, mechanism: str, succeeded: bool) -> None: ...


def log_failed_login(peer: str, mechanism: str, user: str | None, reason: str) -> None:
    log.info("failed SASL login from %s: mechanism %s, user %r: %s", peer, mechanism, user, reason)


_UNKNOWN_USER_KEY = secrets.token_bytes(32)
"""Derives the salt an unknown SCRAM user is offered, the same on every try (RFC 5802 section 9)."""


class _ScramExchange:
    """RFC 5802 server: client-first -> server-first, client-final -> server-final.

    An unknown user is offered a made-up salt and fails at the proof, as a wrong password does: which
    names exist is not told by where (or how fast) a login fails.
    """

    def __init__(self, mechanism: str, store: UserStore) -> None:
        self._digest = SCRAM_HASHES[mechanism]
        self._mechanism = mechanism
        self._store = store
        self._credential: ScramCredential | None = None
        self._auth_message_start = ""
        self._nonce = ""
        self._gs2_header = ""
        self._known = False
        self.claimed_user: str | None = None
        self.user: str | None = None

    @property
    def complete(self) -> bool:
        return self.user is not None

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM message is not UTF-8") from None
        if self._credential is None:
            return self._client_first(text)
        return self._client_final(text)

    def _client_first(self, text: str) -> bytes:
        first = parse_scram_client_first(text)
        self._gs2_header = first.gs2_header
        self.claimed_user = user = first.user
        if first.authorization_id and first.authorization_id != user:
            raise AuthenticationFailed("Authentication failed: the authorization id must be the user name")
        credential = self._store.credential(user, self._mechanism)
        self._known = isinstance(credential, ScramCredential)
        if not isinstance(credential, ScramCredential):
            salt = hmac.digest(_UNKNOWN_USER_KEY, user.encode(), "sha256")
            credential = ScramCredential(salt, DEFAULT_ITERATIONS[self._mechanism], secrets.token_bytes(32),
                                         secrets.token_bytes(32))
        self._credential = credential
        self._nonce = first.nonce + secrets.token_urlsafe(24)
        server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._auth_message_start = f"{first.bare},{server_first}"
        return server_first.encode()

    def _client_final(self, text: str) -> bytes:
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
        if not hmac.compare_digest(hashlib.new(self._digest, client_key).digest(), credential.stored_key) \
                or not self._known:
            raise AuthenticationFailed(_AUTH_FAILED_MESSAGE)
        self.user = self.claimed_user
        return f"v={_b64(hmac.digest(credential.server_key, auth_message, self._digest))}".encode()


class ScramClientFirst(NamedTuple):
    gs2_header: str
    authorization_id: str
    user: str
    nonce: str
    bare: str


def parse_scram_client_first(text: str) -> ScramClientFirst:
    parts = text.split(",", 2)
    if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
        raise AuthenticationFailed("invalid SCRAM client-first message (channel binding is not supported)")
    bare = parts[2]
    attributes = _scram_attributes(bare)
    if "n" not in attributes or "r" not in attributes or set(attributes) - {"n", "r"}:
        raise AuthenticationFailed("invalid SCRAM client-first message (extensions are not supported)")
    return ScramClientFirst(f"{parts[0]},{parts[1]},", _scram_unescape(parts[1][2:]),
                            _scram_unescape(attributes["n"]), attributes["r"], bare)


def _scram_unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def _scram_attributes(message: str) -> dict[str, str]:
    attributes = {}
    for part in message.split(","):
        name, separator, value = part.partition("=")
        if not separator or len(name) != 1:
            raise AuthenticationFailed(f"invalid SCRAM attribute {part!r}")
        attributes[name] = value
    return attributes


class PlainToken(NamedTuple):
    authorization_id: str
    user: str
    password: str


def parse_plain_token(token: bytes) -> PlainToken:
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise AuthenticationFailed("invalid PLAIN message")
    try:
        return PlainToken(*(part.decode() for part in parts))
    except UnicodeDecodeError:
        raise AuthenticationFailed("PLAIN message is not UTF-8") from None


_UNKNOWN_PLAIN_SALT = secrets.token_bytes(16)


def verify_plain(store: UserStore, token: bytes) -> str:
    """The user ``token`` logs in, or AuthenticationFailed; a PBKDF2 as long as a known user's runs for
    an unknown one, so the time taken does not tell which names exist. Run off the event loop."""
    plain = parse_plain_token(token)
    if plain.authorization_id and plain.authorization_id != plain.user:
        raise AuthenticationFailed("Authentication failed: the authorization id must be the user name")
    credential = store.credential(plain.user, PLAIN)
    if not isinstance(credential, PlainCredential):
        PlainCredential(_UNKNOWN_PLAIN_SALT, DEFAULT_ITERATIONS[PLAIN], b"").matches(plain.password)
        raise AuthenticationFailed(_AUTH_FAILED_MESSAGE)
    if not credential.matches(plain.password):
        raise AuthenticationFailed(_AUTH_FAILED_MESSAGE)
    return plain.user


class OAuthBearerToken(NamedTuple):
    authorization_id: str
    header: dict[str, Any]
    claims: dict[str, Any]
    signed: bool


def parse_oauthbearer_token(token: bytes) -> OAuthBearerToken:
    """RFC 7628's initial client response (``n,a=...,\\x01auth=Bearer JWT\\x01\\x01``) and the JWT's parts."""
    try:
        text = token.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed("OAUTHBEARER message is not UTF-8") from None
    gs2, separator, rest = text.partition("\x01")
    gs2_parts = gs2.split(",")
    if not separator or len(gs2_parts) != 3 or gs2_parts[0] != "n" or gs2_parts[2] or \
            (gs2_parts[1] and not gs2_parts[1].startswith("a=")):
        raise AuthenticationFailed("invalid OAUTHBEARER client message")
    values = dict(pair.partition("=")[::2] for pair in rest.split("\x01") if pair)
    scheme, _, jwt = values.get("auth", "").partition(" ")
    parts = jwt.split(".")
    if scheme.lower() != "bearer" or len(parts) != 3:
        raise AuthenticationFailed("invalid OAUTHBEARER token (expected auth=Bearer and a JWT)")
    try:
        header, claims = (json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))) for part in parts[:2])
    except (ValueError, UnicodeDecodeError):
        raise AuthenticationFailed("invalid OAUTHBEARER token (not a JWT)") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise AuthenticationFailed("invalid OAUTHBEARER token (not a JWT)")
    return OAuthBearerToken(_scram_unescape(gs2_parts[1][2:]), header, claims, bool(parts[2]))


def oauthbearer_principal(token: OAuthBearerToken, claim: str) -> str:
    principal = token.claims.get(claim)
    if not isinstance(principal, str) or not principal:
        raise AuthenticationFailed(f"the token has no {claim!r} claim naming the principal")
    if token.authorization_id and token.authorization_id != principal:
        raise AuthenticationFailed("Authentication failed: the authorization id must be the principal")
    return principal


class _OAuthBearerExchange:
    """An unsigned JWT checked as Kafka's unsecured validator does: ``alg`` none, the principal claim,
    an ``exp`` still to come."""

    def __init__(self, settings: LoginSettings) -> None:
        self._claim = settings.oauthbearer_principal_claim
        self.claimed_user: str | None = None
        self.user: str | None = None

    @property
    def complete(self) -> bool:
        return self.user is not None

    def step(self, token: bytes) -> bytes:
        parsed = parse_oauthbearer_token(token)
        self.claimed_user = oauthbearer_principal(parsed, self._claim)
        if parsed.signed or parsed.header.get("alg") != "none":
            raise AuthenticationFailed("only unsecured (alg none) JWTs are accepted")
        expires = parsed.claims.get("exp")
        if isinstance(expires, bool) or not isinstance(expires, (int, float)) or expires <= time.time():
            raise AuthenticationFailed("the token has expired or has no exp claim")
        self.user = self.claimed_user
        return b""


OAUTHBEARER = "OAUTHBEARER"
_FIRST_FRAMED_HANDSHAKE_VERSION = 1  # v0 is followed by unframed tokens, which this proxy does not take


class SaslServer:
    """One connection's login, terminated here as Kafka's ``SaslServerAuthenticator`` runs it.

    The first failure is final: SASL_AUTHENTICATION_FAILED (or the handshake's error) is answered
    ``failed_delay_s`` late and the connection closed. PLAIN's password hash runs in ``pool``.
    ``user`` is set once the login has succeeded.
    """

    needs_upstream_before_login = False

    def __init__(self, store: UserStore, settings: LoginSettings, pool: Executor, peer: str,
                 events: LoginEvents) -> None:
        self._store = store
        self._settings = settings
        self._pool = pool
        self._peer = peer
        self._events = events
        self._mechanism = ""
        self._exchange: _ScramExchange | _OAuthBearerExchange | None = None
        self.user: str | None = None
        self.refused = False
        """The login failed: the connection closes once the answer is sent."""

    @property
    def done(self) -> bool:
        return self.user is not None

    @property
    def mechanisms(self) -> list[str]:
        enabled = self._store.mechanisms
        return [*enabled, OAUTHBEARER] if self._settings.oauthbearer_unsecured_jwt else enabled

    def handle(self, frame: memoryview) -> Decided:
        header = read_request_header(frame)
        api_key, version = header.api_key, header.api_version
        if api_key not in (Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE):
            raise ProtocolError("request before SASL authentication completed", api_key=api_key,
                                api_version=version, offset=0)
        request = decode_request(api_key, version, frame[header.length:])
        if api_key == Api.SASL_HANDSHAKE:
            return self._handshake(header, request.mechanism)
        return self._authenticate(header, bytes(request.auth_bytes))

    def _handshake(self, header: RequestHeader, mechanism: str) -> Decided:
        enabled = self.mechanisms
        if self.done or self._mechanism:
            return self._refuse(header, ILLEGAL_SASL_STATE, "a second SaslHandshake", None,
                                {"error_code": ILLEGAL_SASL_STATE, "mechanisms": enabled})
        if header.api_version < _FIRST_FRAMED_HANDSHAKE_VERSION:
            raise ProtocolError("SaslHandshake v0 (unframed SASL tokens) is not supported",
                                api_key=header.api_key, api_version=header.api_version, offset=0)
        if mechanism not in enabled:
            return self._refuse(header, UNSUPPORTED_SASL_MECHANISM, f"mechanism {mechanism!r} not enabled", None,
                                {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled})
        self._mechanism = mechanism
        if mechanism in SCRAM_HASHES:
            self._exchange = _ScramExchange(mechanism, self._store)
        elif mechanism == OAUTHBEARER:
            self._exchange = _OAuthBearerExchange(self._settings)
        body = encode_response(Api.SASL_HANDSHAKE, header.api_version, {"error_code": 0, "mechanisms": enabled})
        return local_answer(header, body)

    def _authenticate(self, header: RequestHeader, token: bytes) -> Decided:
        if not self._mechanism or self.done:
            return self._refuse(header, ILLEGAL_SASL_STATE, "SaslAuthenticate before a SaslHandshake", None,
                                self._auth_fields(ILLEGAL_SASL_STATE, "SaslAuthenticate before a SaslHandshake"))
        if self._mechanism == PLAIN:
            return self._verify_plain(header, token)
        exchange = self._exchange
        assert exchange is not None
        try:
            reply = exchange.step(token)
        except AuthenticationFailed as failure:
            return self._refuse(header, SASL_AUTHENTICATION_FAILED, str(failure), exchange.claimed_user,
                                self._auth_fields(SASL_AUTHENTICATION_FAILED, str(failure)))
        if exchange.complete:
            self._succeeded(exchange.user)
        return local_answer(header, encode_response(Api.SASL_AUTHENTICATE, header.api_version,
                                                    self._auth_fields(0, None, reply)))

    async def _verify_plain(self, header: RequestHeader, token: bytes) -> Outcome:
        try:
            user = await asyncio.get_running_loop().run_in_executor(self._pool, verify_plain, self._store, token)
        except AuthenticationFailed as failure:
            try:
                claimed: str | None = parse_plain_token(token).user
            except AuthenticationFailed:
                claimed = None
            return await self._refuse(header, SASL_AUTHENTICATION_FAILED, str(failure), claimed,
                                      self._auth_fields(SASL_AUTHENTICATION_FAILED, str(failure)))
        self._succeeded(user)
        return local_answer(header, encode_response(Api.SASL_AUTHENTICATE, header.api_version,
                                                    self._auth_fields(0, None)))

    def _succeeded(self, user: str | None) -> None:
        self.user = user
        self._events.login_ended(self._mechanism, succeeded=True)

    async def _refuse(self, header: RequestHeader, error_code: int, reason: str, user: str | None,
                      fields: dict[str, Any]) -> Outcome:
        """The failure answered ``failed_delay_s`` late, then the connection closed
        (``Selector``'s delayed close on an authentication failure)."""
        log_failed_login(self._peer, self._mechanism or "-", user, reason)
        self._events.login_ended(self._mechanism or "-", succeeded=False)
        self.refused = True
        await asyncio.sleep(self._settings.failed_delay_s)
        return local_answer(header, encode_response(header.api_key, header.api_version, fields),
                            close_after_response=True)

    @staticmethod
    def _auth_fields(error_code: int, message: str | None, reply: bytes = b"") -> dict[str, Any]:
        return {"error_code": error_code, "error_message": message, "auth_bytes": reply, "session_lifetime_ms": 0}


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
