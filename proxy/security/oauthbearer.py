"""OAUTHBEARER tokens checked at the proxy (``sasl-mode = "terminate"``), as Kafka's broker checks them.

A signed JWT is validated as ``BrokerJwtValidator`` does (KIP-768): its signature against a key of a JWKS (a file,
read again when its modification time changes, or an http(s) endpoint, fetched again every
``jwks.endpoint.refresh.ms`` and at once when a token names a key it lacks, as ``RefreshingHttpsJwks`` does), no
``alg: none``, ``exp`` and ``iat`` required, ``exp`` and ``nbf`` checked with the clock skew allowed, the audience
(a token naming one is refused when none is expected, as jose4j refuses it), the issuer when one is expected, the
scope claim's shape and the subject claim naming the principal. PyJWT checks the signature, audience and issuer; the
times are checked here against the clock the validator is given.

An unsigned JWT (``alg: none``) is taken only with ``oauthbearer-unsecured-jwt``, Kafka's unsecured validator, for
tests.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import os
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, Protocol, TypeGuard
from urllib.parse import unquote, urlsplit

from proxy.security.sasl_messages import AuthenticationFailed, OAuthBearerToken, oauthbearer_principal
from proxy.security.users import SaslConfigError

if TYPE_CHECKING:
    import jwt

log = logging.getLogger(__name__)

JWKS_MAX_BYTES = 1 << 20
"""The largest JWKS read: a provider's key set is a few KiB."""
_ALGORITHMS_BY_KEY_TYPE = {
    "RSA": frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}),
    "EC": frozenset({"ES256", "ES384", "ES512", "ES256K"}),
    "OKP": frozenset({"EdDSA"}),
}
"""What a key of each type can verify: public-key signatures only, so a key set's public keys cannot be taken for
an HMAC secret, and ``none`` is never one of them."""
_MISSING_KEY_IDS_REMEMBERED = 16
_MISSING_KEY_ID_REFETCH_S = 60.0
_MISSING_KEY_ID_MAX_LENGTH = 1000
"""As ``RefreshingHttpsJwks``: a key id a token names and the set lacks fetches the set again at once, but the same
id at most once a minute, only the 16 latest ids are remembered and longer ids are ignored."""


class JwksError(SaslConfigError):
    """A JWKS that could not be read or used; the message names where it came from and what was wrong."""


@dataclass(frozen=True)
class OAuthBearerSettings:
    """``[oauthbearer]``: Kafka's ``sasl.oauthbearer.*`` settings (KIP-768), under the same names without the prefix."""

    jwks_endpoint_url: str | None = None
    """``jwks.endpoint.url``: file://, http:// or https://; signed JWTs are validated against it (terminate mode)."""
    jwks_endpoint_refresh_ms: int = 3_600_000
    jwks_endpoint_retry_backoff_ms: int = 100
    jwks_endpoint_retry_backoff_max_ms: int = 10_000
    expected_audience: tuple[str, ...] = ()
    """``expected.audience``: a token must name one of them in ``aud``; empty: a token must name none."""
    expected_issuer: str | None = None
    """``expected.issuer``: the ``iss`` a token must carry; None: any issuer, or none."""
    scope_claim_name: str = "scope"
    sub_claim_name: str = "sub"
    """The claim naming the principal (inspect mode reads it too)."""
    clock_skew_s: int = 30
    unsecured_jwt: bool = False
    """Accept unsigned JWTs instead (Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``), for tests."""

    @property
    def validates_tokens(self) -> bool:
        """The proxy itself accepts OAUTHBEARER logins (terminate mode)."""
        return self.unsecured_jwt or self.jwks_endpoint_url is not None


class TokenValidator(Protocol):
    def principal(self, token: OAuthBearerToken) -> str:
        """The principal ``token`` names, or AuthenticationFailed saying why it is refused."""


class UnsecuredJwtValidator:
    """Kafka's unsecured validator: ``alg`` none, the principal claim, an ``exp`` still to come."""

    def __init__(self, settings: OAuthBearerSettings, clock: Callable[[], float] = time.time) -> None:
        self._claim = settings.sub_claim_name
        self._clock = clock

    def principal(self, token: OAuthBearerToken) -> str:
        principal = oauthbearer_principal(token, self._claim)
        if token.signed or token.header.get("alg") != "none":
            raise AuthenticationFailed("only unsecured (alg none) JWTs are accepted")
        expires = token.claims.get("exp")
        if not _is_number(expires) or expires <= self._clock():
            raise AuthenticationFailed("the token has expired or has no exp claim")
        return principal


class VerificationKey(NamedTuple):
    """A JWKS entry: the public key, and what the entry says of its use."""

    key: jwt.PyJWK
    key_id: str | None
    algorithm: str | None
    """The entry's ``alg``: when given, the only algorithm the key verifies."""
    use: str | None

    def verifies(self, algorithm: Any) -> bool:
        return (algorithm in _ALGORITHMS_BY_KEY_TYPE.get(self.key.key_type or "", ())
                and self.use in (None, "sig") and self.algorithm in (None, algorithm))


class KeySet(Protocol):
    def verification_keys(self) -> Sequence[VerificationKey]:
        """The keys known now."""

    def key_missing(self, key_id: str) -> None:
        """A token named a key the set lacks."""


class SignedJwtValidator:
    """``BrokerJwtValidator``: a signed JWT, verified with a key of ``key_set``."""

    def __init__(self, settings: OAuthBearerSettings, key_set: KeySet, clock: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._key_set = key_set
        self._clock = clock

    def principal(self, token: OAuthBearerToken) -> str:
        claims = self._verified_claims(token)
        settings = self._settings
        _check_times(claims, self._clock(), settings.clock_skew_s)
        _check_scopes(claims.get(settings.scope_claim_name), settings.scope_claim_name)
        subject = claims.get(settings.sub_claim_name)
        if not isinstance(subject, str) or not subject.strip():
            raise AuthenticationFailed(f"Could not validate the access token: the {settings.sub_claim_name!r} claim "
                                       "must be a non-empty string")
        principal = subject.strip()
        if token.authorization_id and token.authorization_id != principal:
            raise AuthenticationFailed("Authentication failed: the authorization id must be the principal")
        return principal

    def _verified_claims(self, token: OAuthBearerToken) -> dict[str, Any]:
        algorithm = token.header.get("alg")
        key = self._key_for(token.header.get("kid"), algorithm)
        settings = self._settings
        import jwt  # PyJWT (and the cryptography it loads) only where tokens are checked: a start without is quicker

        try:
            return jwt.decode(
                token.jwt, key.key, algorithms=[str(algorithm)],
                audience=list(settings.expected_audience) or None, issuer=settings.expected_issuer,
                # the times are checked against the validator's clock (_check_times); PyJWT checks their presence.
                # Without an expected audience a token carrying one is refused, as jose4j's default AudValidator
                # refuses it ("present in the JWT but no expected audience value(s) were provided")
                options={"require": ["exp", "iat"], "verify_exp": False, "verify_nbf": False, "verify_iat": False})
        except jwt.PyJWTError as error:
            raise AuthenticationFailed(f"Could not validate the access token: {error}") from None

    def _key_for(self, key_id: Any, algorithm: Any) -> jwt.PyJWK:
        if not isinstance(algorithm, str) or not any(algorithm in accepted
                                                     for accepted in _ALGORITHMS_BY_KEY_TYPE.values()):
            raise AuthenticationFailed(f"Could not validate the access token: algorithm {algorithm!r} is not accepted")
        usable = [key for key in self._key_set.verification_keys() if key.verifies(algorithm)]
        if key_id is not None:
            usable = [key for key in usable if key.key_id == key_id]
        if len(usable) == 1:
            return usable[0].key
        if key_id is not None and not usable:
            self._key_set.key_missing(str(key_id))
            raise AuthenticationFailed(f"Could not validate the access token: no key {key_id!r} for {algorithm} "
                                       "in the JWKS")
        raise AuthenticationFailed(f"Could not validate the access token: {len(usable)} keys of the JWKS could "
                                   f"verify {algorithm} and the token names none (kid)")


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_times(claims: dict[str, Any], now_s: float, skew_s: int) -> None:
    """As jose4j's ``NumericDateValidator`` under Kafka's settings: expired from ``exp`` + skew on, not yet valid
    before ``nbf`` - skew, ``iat`` only present and not negative."""
    expires, issued, not_before = claims.get("exp"), claims.get("iat"), claims.get("nbf", 0)
    if not _is_number(expires) or not _is_number(issued) or not _is_number(not_before) or issued < 0:
        raise AuthenticationFailed("Could not validate the access token: exp, iat and nbf must be numeric dates")
    if now_s - skew_s >= expires:
        raise AuthenticationFailed(f"Could not validate the access token: it expired at {expires} "
                                   f"(now {int(now_s)}, {skew_s} s of clock skew allowed)")
    if now_s + skew_s < not_before:
        raise AuthenticationFailed(f"Could not validate the access token: not valid before {not_before}")


def _check_scopes(scope: Any, claim: str) -> None:
    """``ClaimValidationUtils.validateScopes``: a string is one scope, a list its strings (non-blank, no repeats)."""
    scopes = [scope] if isinstance(scope, str) else scope if isinstance(scope, list) else []
    seen: set[str] = set()
    for entry in scopes:
        if not isinstance(entry, str) or not entry.strip():
            raise AuthenticationFailed(f"Could not validate the access token: {claim} values must be non-empty "
                                       "strings")
        if entry.strip() in seen:
            raise AuthenticationFailed(f"Could not validate the access token: {claim} value must not contain "
                                       f"duplicates - {entry.strip()} already present")
        seen.add(entry.strip())


def parse_jwks(text: bytes, where: str) -> list[VerificationKey]:
    """The usable keys of a JWKS document (keys of other types are skipped, as jose4j skips them)."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise JwksError(f"{where}: not JSON ({error})") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise JwksError(f"{where}: not a JWKS (no \"keys\" list)")
    import jwt

    keys = []
    for entry in entries:
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, TypeError, AttributeError) as error:
            log.warning("%s: key %r skipped: %s", where, entry.get("kid") if isinstance(entry, dict) else None, error)
            continue
        if key.key_type in _ALGORITHMS_BY_KEY_TYPE:
            keys.append(VerificationKey(key, key.key_id, entry.get("alg"), key.public_key_use))
    if not keys:
        raise JwksError(f"{where}: no public key the proxy can verify signatures with (RSA, EC or OKP)")
    return keys


def _read_jwks(source: BinaryIO, where: str) -> list[VerificationKey]:
    text = source.read(JWKS_MAX_BYTES + 1)
    if len(text) > JWKS_MAX_BYTES:
        raise JwksError(f"{where}: larger than {JWKS_MAX_BYTES} bytes")
    return parse_jwks(text, where)


class JwksFile:
    """A JWKS file, read again when its modification time changes (Kafka's ``JwksFileVerificationKeyResolver``).
    A file changed into something unusable keeps the keys read before, with a log line."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._modified: int | None = self._stat()
        self._keys = self._read()
        self._told = ""
        """What was last found wrong with the file, logged once."""

    def _stat(self) -> int:
        try:
            return os.stat(self._path).st_mtime_ns
        except OSError as error:
            raise JwksError(f"JWKS file {self._path}: {error.strerror}") from None

    def _read(self) -> list[VerificationKey]:
        where = f"JWKS file {self._path}"
        try:
            with open(self._path, "rb") as file:
                return _read_jwks(file, where)
        except OSError as error:
            raise JwksError(f"{where}: {error.strerror}") from None

    def verification_keys(self) -> Sequence[VerificationKey]:
        """A change is read once; one that cannot be read (gone, or caught half-written) is tried again at the next
        login, as Kafka's ``CachedFile`` tries again, and logged once for each time the file changes."""
        try:
            modified = self._stat()
            if modified != self._modified:
                self._keys = self._read()
                self._modified = modified
                log.info("JWKS file %s read again: %d keys", self._path, len(self._keys))
        except JwksError as error:
            if str(error) != self._told:
                log.error("%s; the keys read before stay in use", error)
                self._told = str(error)
        return self._keys

    def key_missing(self, key_id: str) -> None:
        """The file is read again when it changes, not when a token asks."""


def fetch_jwks(url: str, timeout_s: float) -> list[VerificationKey]:
    """GET a JWKS endpoint (blocking: run it off the event loop)."""
    where = f"JWKS endpoint {url}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return _read_jwks(answer, where)
    except (OSError, http.client.HTTPException) as error:  # a truncated or garbled answer is not an OSError
        raise JwksError(f"{where}: {error or type(error).__name__}") from None


class JwksEndpoint:
    """An http(s) JWKS (Kafka's ``RefreshingHttpsJwks``): fetched at start, again every refresh interval and at
    once when a token names a key it lacks; a failed fetch is retried with backoff and keeps the keys fetched
    before."""

    def __init__(self, settings: OAuthBearerSettings,
                 fetch: Callable[[str, float], list[VerificationKey]] = fetch_jwks,
                 clock: Callable[[], float] = time.monotonic) -> None:
        assert settings.jwks_endpoint_url is not None
        self._url = settings.jwks_endpoint_url
        self._settings = settings
        self._fetch = fetch
        self._clock = clock
        self._keys: list[VerificationKey] = []
        self._missing: OrderedDict[str, float] = OrderedDict()
        self._refreshing: asyncio.Task[None] | None = None
        """The one refresh in flight (Kafka's ``refreshInProgressFlag``): later ones wait for it, not beside it."""

    async def start(self) -> None:
        """The first fetch, retried with backoff until ``jwks.endpoint.retry.backoff.max.ms`` has passed; JwksError
        if none succeeded (the proxy does not start without keys, as a broker does not)."""
        self._keys = await self._fetch_with_retries()
        log.info("JWKS endpoint %s: %d keys", self._url, len(self._keys))

    async def refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._settings.jwks_endpoint_refresh_ms / 1000)
            await asyncio.shield(self._refresh())

    def _refresh(self) -> asyncio.Task[None]:
        """The refresh in flight, or a new one."""
        if self._refreshing is None:
            self._refreshing = asyncio.get_running_loop().create_task(self._refreshed())
        return self._refreshing

    async def _refreshed(self) -> None:
        try:
            self._keys = await self._fetch_with_retries()
        except JwksError as error:
            log.error("%s; the keys fetched before stay in use", error)
        finally:
            self._refreshing = None

    async def _fetch_with_retries(self) -> list[VerificationKey]:
        settings = self._settings
        backoff_s = settings.jwks_endpoint_retry_backoff_ms / 1000
        give_up = self._clock() + settings.jwks_endpoint_retry_backoff_max_ms / 1000
        timeout_s = max(1.0, settings.jwks_endpoint_retry_backoff_max_ms / 1000)
        while True:
            try:
                return await asyncio.to_thread(self._fetch, self._url, timeout_s)
            except JwksError as error:
                if self._clock() + backoff_s > give_up:
                    raise
                log.warning("%s; trying again in %.1f s", error, backoff_s)
            await asyncio.sleep(backoff_s)
            backoff_s *= 2

    def verification_keys(self) -> Sequence[VerificationKey]:
        return self._keys

    def key_missing(self, key_id: str) -> None:
        if len(key_id) > _MISSING_KEY_ID_MAX_LENGTH:
            return
        now = self._clock()
        asked = self._missing.get(key_id)
        if asked is not None and now - asked < _MISSING_KEY_ID_REFETCH_S:
            return
        self._missing[key_id] = now
        self._missing.move_to_end(key_id)
        while len(self._missing) > _MISSING_KEY_IDS_REMEMBERED:
            self._missing.popitem(last=False)
        self._refresh()


def token_validator(settings: OAuthBearerSettings) -> tuple[TokenValidator | None, JwksEndpoint | None]:
    """What checks OAUTHBEARER tokens at the proxy, if anything does, and the JWKS endpoint to start with it
    (JwksError if a JWKS file cannot be read)."""
    if settings.unsecured_jwt:
        return UnsecuredJwtValidator(settings), None
    if settings.jwks_endpoint_url is None:
        return None, None
    url = urlsplit(settings.jwks_endpoint_url)
    if url.scheme == "file":
        return SignedJwtValidator(settings, JwksFile(Path(unquote(url.path)))), None
    endpoint = JwksEndpoint(settings)
    return SignedJwtValidator(settings, endpoint), endpoint
