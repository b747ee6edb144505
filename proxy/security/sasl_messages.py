"""The SASL mechanisms' messages: PLAIN tokens, SCRAM client-first messages (RFC 5802), OAUTHBEARER
tokens with their JWT (RFC 7628), read by the proxy's login (``sasl``) and its inspection
(``sasl_inspect``); and the client side, for the proxy's own upstream login."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import Any, NamedTuple

from protocol.apis import Api
from protocol.codecs import decode_request
from protocol.header import RequestHeader
from proxy.security.users import MAX_SCRAM_ITERATIONS, MIN_SCRAM_ITERATIONS, SCRAM_HASHES, b64, saslprep


def sasl_request_field(frame: memoryview, header: RequestHeader) -> str | bytes:
    """A SaslHandshake's mechanism, or a SaslAuthenticate's token."""
    request = decode_request(header.api_key, header.api_version, frame[header.length:])
    if header.api_key == Api.SASL_HANDSHAKE:
        return str(request.mechanism)
    return bytes(request.auth_bytes)


class AuthenticationFailed(Exception):
    pass



class ScramClientFirst(NamedTuple):
    gs2_header: str
    authorization_id: str
    user: str
    nonce: str
    bare: str
    extensions: dict[str, str]
    """Kafka's SCRAM extensions after the nonce (``tokenauth=true``: the user is a delegation token's id)."""

    @property
    def delegation_token(self) -> bool:
        return self.extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true"  # Boolean.parseBoolean, as Kafka


TOKEN_AUTH_EXTENSION = "tokenauth"


def parse_scram_client_first(text: str) -> ScramClientFirst:
    """``gs2-header n=user,r=nonce[,key=value...]``, as Kafka's ``ClientFirstMessage`` reads it."""
    parts = text.split(",", 2)
    if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
        raise AuthenticationFailed("invalid SCRAM client-first message (channel binding is not supported)")
    bare = parts[2]
    user, _, rest_text = bare.partition(",")
    nonce, *rest = rest_text.split(",")
    if not user.startswith("n=") or not nonce.startswith("r="):
        raise AuthenticationFailed("invalid SCRAM client-first message (expected n=user,r=nonce)")
    extensions = {}
    for extension in rest:
        key, separator, value = extension.partition("=")
        if not separator or not key:
            raise AuthenticationFailed(f"invalid SCRAM extension {extension!r}")
        extensions[key] = value
    return ScramClientFirst(f"{parts[0]},{parts[1]},", _scram_unescape(parts[1][2:]),
                            _scram_unescape(user[2:]), nonce[2:], bare, extensions)


def _scram_unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def scram_attributes(message: str) -> dict[str, str]:
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



class OAuthBearerToken(NamedTuple):
    authorization_id: str
    jwt: str
    header: dict[str, Any]
    """The JWT's header and claims, as yet unverified."""
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
    return OAuthBearerToken(_scram_unescape(gs2_parts[1][2:]), jwt, header, claims, bool(parts[2]))


def oauthbearer_principal(token: OAuthBearerToken, claim: str) -> str:
    principal = token.claims.get(claim)
    if not isinstance(principal, str) or not principal:
        raise AuthenticationFailed(f"the token has no {claim!r} claim naming the principal")
    if token.authorization_id and token.authorization_id != principal:
        raise AuthenticationFailed("Authentication failed: the authorization id must be the principal")
    return principal



# ---- the client side (the proxy's own upstream login) ------------------------------------------

class ScramSalt(NamedTuple):
    salt: bytes
    iterations: int


def salted_password(mechanism: str, password: str, salt: ScramSalt) -> bytes:
    """SCRAM's SaltedPassword, Hi(password, salt, i): PBKDF2, thousands of HMACs (milliseconds)."""
    return hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], saslprep(password), salt.salt, salt.iterations)


class ScramClient:
    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.mechanism = mechanism
        self._digest = SCRAM_HASHES[mechanism]
        self._password = password
        self._nonce = secrets.token_urlsafe(24)
        escaped = user.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={escaped},r={self._nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def server_salt(self, server_first: bytes) -> ScramSalt:
        """The salt and iteration count the server-first message asks for, refused outside Kafka's bounds (a
        count beyond them is no credential a Kafka cluster holds, and would cost the proxy that many HMACs)."""
        try:
            attributes = scram_attributes(server_first.decode())
        except UnicodeDecodeError:
            raise AuthenticationFailed("invalid SCRAM server-first message (not UTF-8)") from None
        salt, iterations = attributes.get("s", ""), attributes.get("i", "")
        if not attributes.get("r", "").startswith(self._nonce) or not iterations.isdigit():
            raise AuthenticationFailed("invalid SCRAM server-first message")
        if not MIN_SCRAM_ITERATIONS <= int(iterations) <= MAX_SCRAM_ITERATIONS:
            raise AuthenticationFailed(f"the server asks for {iterations} SCRAM iterations, outside Kafka's "
                                       f"{MIN_SCRAM_ITERATIONS}-{MAX_SCRAM_ITERATIONS} for {self.mechanism}")
        try:
            return ScramSalt(base64.b64decode(salt, validate=True), int(iterations))
        except ValueError:
            raise AuthenticationFailed("invalid SCRAM server-first message (salt)") from None

    def final_message(self, server_first: bytes, salted: bytes | None = None) -> bytes:
        """``salted``: the SaltedPassword for ``server_salt(server_first)``, when the caller computed it
        (computed here otherwise)."""
        if salted is None:
            salted = salted_password(self.mechanism, self._password, self.server_salt(server_first))
        text = server_first.decode()
        nonce = scram_attributes(text)["r"]
        client_key = hmac.digest(salted, b"Client Key", self._digest)
        stored_key = hashlib.new(self._digest, client_key).digest()
        without_proof = f"c={b64(b'n,,')},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self._digest)
        self._server_signature = hmac.digest(server_key, auth_message, self._digest)
        return f"{without_proof},p={b64(proof)}".encode()

    def verify_server(self, server_final: bytes) -> None:
        expected = f"v={b64(self._server_signature)}".encode()
        if not hmac.compare_digest(server_final, expected):
            raise AuthenticationFailed("the upstream's SCRAM server signature does not match")


def plain_token(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()
