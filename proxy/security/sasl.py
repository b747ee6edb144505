"""SASL terminated at the proxy: PLAIN, SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and OAUTHBEARER (RFC 7628) with
JWTs signed by a key of a JWKS (or, for tests, unsigned ones).

``SaslServer`` runs one connection's exchange as Kafka's ``SaslServerAuthenticator`` does:
SaslHandshake (v1) names the mechanism, SaslAuthenticate frames carry the tokens, the first failure
is answered (late) with SASL_AUTHENTICATION_FAILED and the connection closes, and any other request
before success (except ApiVersions, which the connection answers) closes it. Users and their
credentials are in ``users``; the mechanisms' messages in ``sasl_messages``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import secrets
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from protocol.apis import Api
from protocol.codecs import encode_response
from protocol.errors import ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ProtocolError
from protocol.header import RequestHeader, read_request_header
from proxy.decision.outcome import Decided, Outcome, local_answer
from proxy.security.oauthbearer import OAuthBearerSettings, TokenValidator
from proxy.security.sasl_messages import (
    AuthenticationFailed,
    parse_oauthbearer_token,
    parse_plain_token,
    parse_scram_client_first,
    sasl_request_field,
    scram_attributes,
)
from proxy.security.users import (
    DEFAULT_ITERATIONS,
    PLAIN,
    SCRAM_HASHES,
    PlainCredential,
    ScramCredential,
    UserStore,
    b64,
)

_AUTH_FAILED_MESSAGE = "Authentication failed: Invalid username or password"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoginSettings:
    """How logins are run (``sasl-*`` settings); Kafka's names in the comments."""

    timeout_s: float = 10.0
    """A connection that has not logged in by then is closed."""
    failed_delay_s: float = 0.1
    """``connection.failed.authentication.delay.ms``: a failed login is answered, then closed, this late."""
    max_receive_bytes: int = 512 * 1024
    """``sasl.server.max.receive.size``: the largest frame taken before a login completes."""
    oauthbearer: OAuthBearerSettings = OAuthBearerSettings()


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
        if first.extensions:  # the one Kafka knows names a delegation token, which only the cluster holds
            raise AuthenticationFailed("SCRAM extensions (delegation tokens) are not supported by the proxy's logins: "
                                       f"{', '.join(sorted(first.extensions))}")
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
        server_first = f"r={self._nonce},s={b64(credential.salt)},i={credential.iterations}"
        self._auth_message_start = f"{first.bare},{server_first}"
        return server_first.encode()

    def _client_final(self, text: str) -> bytes:
        assert self._credential is not None
        without_proof, separator, proof_text = text.rpartition(",p=")
        attributes = scram_attributes(without_proof) if separator else {}
        if attributes.get("r") != self._nonce:
            raise AuthenticationFailed("invalid SCRAM client-final message (nonce mismatch)")
        if attributes.get("c") != b64(self._gs2_header.encode()):
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
        return f"v={b64(hmac.digest(credential.server_key, auth_message, self._digest))}".encode()


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


class _OAuthBearerExchange:
    """RFC 7628's one message: the client's token, checked by ``validator``."""

    def __init__(self, validator: TokenValidator, principal_claim: str) -> None:
        self._validator = validator
        self._claim = principal_claim
        self.claimed_user: str | None = None
        self.user: str | None = None

    @property
    def complete(self) -> bool:
        return self.user is not None

    def step(self, token: bytes) -> bytes:
        parsed = parse_oauthbearer_token(token)
        claimed = parsed.claims.get(self._claim)
        self.claimed_user = claimed if isinstance(claimed, str) else None  # for the log line of a refusal
        self.user = self._validator.principal(parsed)
        return b""


OAUTHBEARER = "OAUTHBEARER"
_FIRST_FRAMED_HANDSHAKE_VERSION = 1  # v0 is followed by unframed tokens, which this proxy does not take


class SaslServer:
    """One connection's login, terminated here as Kafka's ``SaslServerAuthenticator`` runs it.

    The first failure is final: SASL_AUTHENTICATION_FAILED (or the handshake's error) is answered
    ``failed_delay_s`` late and the connection closed. PLAIN's password hash runs in ``pool``.
    ``user`` is set once the login has succeeded. PLAIN and SCRAM users are in ``store``; OAUTHBEARER tokens are
    checked by ``tokens``; either may be absent.
    """

    needs_upstream_before_login = False

    def __init__(self, store: UserStore | None, tokens: TokenValidator | None, settings: LoginSettings,
                 pool: Executor, peer: str, events: LoginEvents) -> None:
        self._store = store
        self._tokens = tokens
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
        enabled = [] if self._store is None else self._store.mechanisms
        return enabled if self._tokens is None else [*enabled, OAUTHBEARER]

    def handle(self, frame: memoryview) -> Decided:
        header = read_request_header(frame)
        api_key, version = header.api_key, header.api_version
        if api_key not in (Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE):
            raise ProtocolError("request before SASL authentication completed", api_key=api_key,
                                api_version=version, offset=0)
        field = sasl_request_field(frame, header)
        if isinstance(field, str):
            return self._handshake(header, field)
        return self._authenticate(header, field)

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
            assert self._store is not None
            self._exchange = _ScramExchange(mechanism, self._store)
        elif mechanism == OAUTHBEARER:
            assert self._tokens is not None
            self._exchange = _OAuthBearerExchange(self._tokens, self._settings.oauthbearer.sub_claim_name)
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
        assert self._store is not None  # PLAIN is offered only with users
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

