"""SASL inspected on its way to the cluster (``sasl-mode = "inspect"``).

The client logs in to the cluster itself: SaslHandshake and SaslAuthenticate go upstream as they
are, so the cluster verifies the password and authorizes every later request as that client. The
proxy reads the name the client logs in with from its own tokens (PLAIN's authcid, SCRAM's ``n=``,
the OAUTHBEARER JWT's principal claim) and takes it as the connection's principal only once the
cluster has answered the exchange's last SaslAuthenticate without an error.
"""

from __future__ import annotations

from typing import Any

from protocol.apis import Api
from protocol.codecs import decode_response, encode_response
from protocol.errors import UNSUPPORTED_SASL_MECHANISM, ProtocolError
from protocol.header import RequestHeader, read_request_header
from proxy.decision.outcome import FORWARD, Decided, Outcome, local_answer
from proxy.security.sasl import OAUTHBEARER, LoginEvents, LoginSettings, log_failed_login
from proxy.security.sasl_messages import (
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


class SaslInspector:
    """One connection's login, watched; ``user`` is set once the cluster has accepted it."""

    needs_upstream_before_login = True

    def __init__(self, settings: LoginSettings, peer: str, events: LoginEvents) -> None:
        self._claim = settings.oauthbearer.sub_claim_name
        self._peer = peer
        self._events = events
        self._mechanism = ""
        self._claimed_user: str | None = None
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

    def _authenticate(self, header: RequestHeader, token: bytes) -> Outcome:
        if self._steps_answered == 0:
            self._claimed_user = self._user_named_by(token)
        version = header.api_version

        def watch(body: memoryview) -> bytes:
            answer = decode_response(Api.SASL_AUTHENTICATE, version, body)
            self._answered(answer)
            return bytes(body)

        return Outcome(finish=watch)

    def _user_named_by(self, token: bytes) -> str | None:
        try:
            if self._mechanism == PLAIN:
                return parse_plain_token(token).user
            if self._mechanism == OAUTHBEARER:
                return oauthbearer_principal(parse_oauthbearer_token(token), self._claim)
            if self._mechanism in SCRAM_HASHES:
                return parse_scram_client_first(token.decode(errors="replace")).user
        except AuthenticationFailed:
            pass
        return None  # the cluster refuses what the proxy cannot read

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
