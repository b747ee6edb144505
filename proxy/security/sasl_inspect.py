"""SASL inspected on its way to the cluster (``sasl-mode = "inspect"``).

The client logs in to the cluster itself: SaslHandshake and SaslAuthenticate go upstream as they
are, so the cluster verifies the password and authorizes every later request as that client. The
proxy reads the name the client logs in with from its own tokens (PLAIN's authcid, SCRAM's ``n=``,
the OAUTHBEARER JWT's principal claim) and takes it as the connection's principal only once the
cluster has answered the exchange's last SaslAuthenticate without an error.
A SCRAM login with a delegation token (``tokenauth=true``) names the token's id: its principal is the token's
owner, which the proxy learns from the cluster before the login's last step goes on. A login whose principal the
proxy cannot learn is refused, never charged to ``ANONYMOUS``.
"""

from __future__ import annotations

from typing import Any, Protocol

from protocol.apis import Api
from protocol.codecs import decode_response, encode_response
from protocol.errors import SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ProtocolError
from protocol.header import RequestHeader, read_request_header
from proxy.decision.outcome import FORWARD, Decided, Forward, OnResponse, Outcome, local_answer
from proxy.security.sasl import OAUTHBEARER, LoginEvents, LoginSettings, log_failed_login
from proxy.security.sasl_messages import (
    TOKEN_AUTH_EXTENSION,
    AuthenticationFailed,
    oauthbearer_principal,
    parse_oauthbearer_token,
    parse_plain_token,
    parse_scram_client_first,
    sasl_request_field,
)
from proxy.security.users import PLAIN, SCRAM_HASHES

READABLE_MECHANISMS = (PLAIN, *SCRAM_HASHES, OAUTHBEARER)
"""Mechanisms whose tokens name the user; with any other (GSSAPI) the principal could not be known."""
_STEPS = {PLAIN: 1, OAUTHBEARER: 1, **dict.fromkeys(SCRAM_HASHES, 2)}
"""SaslAuthenticate round trips a successful login takes."""


class TokenOwnerUnknown(Exception):
    """Whose a delegation token is could not be learnt; the message says why."""


class TokenOwnerLookup(Protocol):
    async def owner(self, token_id: str) -> str:
        """The name of the principal owning the token, or TokenOwnerUnknown."""


class SaslInspector:
    """One connection's login, watched; ``user`` is set once the cluster has accepted it."""

    needs_upstream_before_login = True

    def __init__(self, settings: LoginSettings, peer: str, events: LoginEvents, token_owners: TokenOwnerLookup) -> None:
        self._claim = settings.oauthbearer.sub_claim_name
        self._peer = peer
        self._events = events
        self._token_owners = token_owners
        self._mechanism = ""
        self._claimed_user: str | None = None
        self._token_id: str | None = None
        """The delegation token a SCRAM login names (``tokenauth=true``), whose owner is not known yet."""
        self._steps_answered = 0
        self.user: str | None = None
        self.refused = False
        """The cluster refused the login: the connection closes once its answer is sent, as the cluster
        closes it, and nothing behind it is read (or charged)."""

    @property
    def done(self) -> bool:
        return self.user is not None

    def handle(self, frame: memoryview) -> Decided:
        """A SaslHandshake or SaslAuthenticate (other requests never come here)."""
        header = read_request_header(frame)
        if header.api_key != Api.SASL_HANDSHAKE and self.done:
            return FORWARD  # a re-authentication: the cluster keeps the principal
        field = sasl_request_field(frame, header)
        if isinstance(field, str):
            return self._handshake(header, field)
        return self._authenticate(header, field)

    def _handshake(self, header: RequestHeader, mechanism: str) -> Outcome:
        if header.api_version < 1:
            raise ProtocolError("SaslHandshake v0 (unframed SASL tokens) is not supported",
                                api_key=header.api_key, api_version=header.api_version, offset=0)
        if mechanism not in READABLE_MECHANISMS:
            log_failed_login(self._peer, mechanism, None, "a mechanism whose tokens do not name the user")
            self._events.login_ended("-", succeeded=False)  # "-": a client's words never become a label
            body = encode_response(Api.SASL_HANDSHAKE, header.api_version,
                                   {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(READABLE_MECHANISMS)})
            return local_answer(header, body, close_after_response=True)
        if not self.done:
            self._mechanism = mechanism
            self._steps_answered = 0
        return FORWARD

    def _authenticate(self, header: RequestHeader, token: bytes) -> Decided:
        if not self._mechanism:
            return self._forwarded(header.api_version)  # the cluster answers ILLEGAL_SASL_STATE
        if self._steps_answered == 0:
            self._token_id = None
            try:
                self._claimed_user = self._user_named_by(token)
            except AuthenticationFailed as unnamed:
                return self._refuse(header, f"the proxy cannot tell who logs in: {unnamed}")
        if self._token_id is not None and self._steps_answered == 1:
            return self._with_token_owner(header)
        return self._forwarded(header.api_version)

    def _forwarded(self, version: int) -> Outcome:
        def watch(body: memoryview) -> bytes:
            answer = decode_response(Api.SASL_AUTHENTICATE, version, body)
            self._answered(answer)
            return bytes(body)

        return Forward(on_response=OnResponse(finish=watch))

    async def _with_token_owner(self, header: RequestHeader) -> Outcome:
        """The last step of a delegation-token login goes on once the token's owner is known."""
        token_id = self._token_id
        assert token_id is not None
        try:
            self._claimed_user = await self._token_owners.owner(token_id)
        except TokenOwnerUnknown as unknown:
            return self._refuse(header, f"the owner of delegation token {token_id!r} cannot be learnt: {unknown}")
        return self._forwarded(header.api_version)

    def _refuse(self, header: RequestHeader, reason: str) -> Outcome:
        """SASL_AUTHENTICATION_FAILED saying why, and the connection closed: a login the proxy cannot name does not
        go on, whatever the cluster would answer."""
        log_failed_login(self._peer, self._mechanism or "-", self._claimed_user, reason)
        self._events.login_ended(self._mechanism or "-", succeeded=False)
        self.refused = True
        body = encode_response(Api.SASL_AUTHENTICATE, header.api_version, {
            "error_code": SASL_AUTHENTICATION_FAILED, "error_message": f"Authentication failed: {reason}",
            "auth_bytes": b"", "session_lifetime_ms": 0})
        return local_answer(header, body, close_after_response=True)

    def _user_named_by(self, token: bytes) -> str:
        """The user the first token names (AuthenticationFailed when it names none the proxy can read)."""
        if self._mechanism == PLAIN:
            return parse_plain_token(token).user
        if self._mechanism == OAUTHBEARER:
            return oauthbearer_principal(parse_oauthbearer_token(token), self._claim)
        first = parse_scram_client_first(token.decode(errors="replace"))
        unknown = set(first.extensions) - {TOKEN_AUTH_EXTENSION}
        if unknown:  # Kafka refuses them too (ScramSaslServer's SUPPORTED_EXTENSIONS)
            raise AuthenticationFailed(f"unsupported SCRAM extensions {', '.join(sorted(unknown))}")
        if first.delegation_token:
            self._token_id = first.user
        return first.user

    def _answered(self, answer: Any) -> None:
        mechanism = self._mechanism or "-"
        if answer.error_code:
            log_failed_login(self._peer, mechanism, self._claimed_user,
                             f"the cluster answered error {answer.error_code}: {answer.error_message}")
            self._events.login_ended(mechanism, succeeded=False)
            self.refused = True
            return
        self._steps_answered += 1
        challenge = self._mechanism == OAUTHBEARER and answer.auth_bytes  # an error, sent as a challenge (RFC 7628)
        if self._steps_answered == _STEPS.get(self._mechanism) and not challenge and self._claimed_user:
            self.user = self._claimed_user
            self._events.login_ended(mechanism, succeeded=True)
