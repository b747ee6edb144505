"""TLS for the client listeners (``[tls]``) and the connections to the cluster (``[upstream-tls]``).

Contexts are rebuilt when their certificate, key or CA files change; connections opened after that
use the new ones, as the quota and users files are re-read. A client certificate's subject becomes
the principal through Kafka's ``ssl.principal.mapping.rules`` (``SslPrincipalMapper``).
"""

from __future__ import annotations

import logging
import re
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.files.watched_file import WatchedFile

log = logging.getLogger(__name__)

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
TLS_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
RECHECK_INTERVAL_S = 1.0


class TlsConfigError(ValueError):
    """A TLS setting or file is invalid; the message says which."""


# ---- ssl.principal.mapping.rules --------------------------------------------------------------------

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None
    """None: DEFAULT, the whole distinguished name."""
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        mapped = self.pattern.sub(self.replacement, name)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


def _python_replacement(java: str, groups: int) -> str:
    """Java's ``$N`` group references as Python's; like Kafka, ``$N`` past the last group is kept
    literally (trying ``$1`` of ``$12`` first), and a backslash escapes the next character."""
    def reference(match: re.Match[str]) -> str:
        digits = match.group(1)
        while len(digits) > 1 and (int(digits) > groups or digits.startswith("0")):
            digits = digits[:-1]
        if int(digits) > groups:
            return "$" + match.group(1)
        return f"\\g<{int(digits)}>" + match.group(1)[len(digits):]

    pieces = re.split(r"(\\.)", java)
    return "".join(piece[1].replace("\\", "\\\\") if piece.startswith("\\") and len(piece) == 2
                   else _BACK_REFERENCE.sub(reference, piece.replace("\\", "\\\\")) for piece in pieces)


class PrincipalMapper:
    """``ssl.principal.mapping.rules``: the first rule matching the whole subject name gives the principal."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self._rules: list[_Rule] = []
        for text in (m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip()) if m.group(1)):
            parsed = _RULE_PARSER.match(text)
            if parsed is None or parsed.end() != len(text):
                raise TlsConfigError(f"principal-mapping-rules: invalid rule {text!r}")
            if parsed.group(1):
                self._rules.append(_Rule(None))
            else:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as error:
                    raise TlsConfigError(f"principal-mapping-rules: {text!r}: {error}") from None
                self._rules.append(_Rule(pattern, _python_replacement(parsed.group(3), pattern.groups),
                                         parsed.group(4)))

    def name(self, distinguished_name: str) -> str | None:
        """The principal's name, or None when no rule applies (Kafka then fails the connection)."""
        for rule in self._rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        return None


_RFC2253_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
                     "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
                     "domainComponent": "DC", "userId": "UID"}
_RFC2253_SPECIAL = re.compile(r'([,+"\\<>;])')


def _rfc2253_value(value: str) -> str:
    escaped = _RFC2253_SPECIAL.sub(r"\\\1", value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


def subject_name(certificate: dict[str, Any]) -> str:
    """The subject as Java's ``X500Principal.getName()`` writes it (RFC 2253: most specific first), the
    name Kafka's mapping rules see; attributes Java writes as OIDs keep OpenSSL's names here."""
    rdns = certificate.get("subject", ())
    return ",".join("+".join(f"{_RFC2253_KEYWORDS.get(key, key)}={_rfc2253_value(value)}" for key, value in rdn)
                    for rdn in reversed(rdns))


# ---- settings and contexts --------------------------------------------------------------------------

@dataclass(frozen=True)
class ListenerTls:
    """``[tls]``: every client listener speaks TLS."""

    certfile: Path
    keyfile: Path
    cafile: Path | None = None
    client_auth: str = "none"
    principal_mapping_rules: str = "DEFAULT"
    ciphers: str | None = None
    min_version: str = "1.2"

    def files(self) -> list[Path]:
        return [path for path in (self.certfile, self.keyfile, self.cafile) if path is not None]

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _common(context, self.min_version, self.ciphers)
        _load_chain(context, self.certfile, self.keyfile, "[tls]")
        context.verify_mode = CLIENT_AUTH[self.client_auth]
        if self.cafile is not None:
            _load_ca(context, self.cafile, "[tls]")
        return context


@dataclass(frozen=True)
class UpstreamTls:
    """``[upstream-tls]``: the proxy's connections to the cluster use TLS."""

    cafile: Path | None = None
    certfile: Path | None = None
    keyfile: Path | None = None
    check_hostname: bool = True

    def files(self) -> list[Path]:
        return [path for path in (self.cafile, self.certfile, self.keyfile) if path is not None]

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        _common(context, "1.2", None)
        context.check_hostname = self.check_hostname
        if self.cafile is not None:
            _load_ca(context, self.cafile, "[upstream-tls]")
        else:
            context.load_default_certs()
        if self.certfile is not None:
            _load_chain(context, self.certfile, self.keyfile, "[upstream-tls]")
        return context


def _common(context: ssl.SSLContext, min_version: str, ciphers: str | None) -> None:
    context.minimum_version = TLS_VERSIONS[min_version]
    context.options |= ssl.OP_NO_COMPRESSION
    if ciphers:
        try:
            context.set_ciphers(ciphers)
        except ssl.SSLError as error:
            raise TlsConfigError(f"[tls] ciphers: {error}") from None


def _load_chain(context: ssl.SSLContext, certfile: Path, keyfile: Path | None, where: str) -> None:
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as error:
        raise TlsConfigError(f"{where} certfile/keyfile {certfile}: {error}") from None


def _load_ca(context: ssl.SSLContext, cafile: Path, where: str) -> None:
    try:
        context.load_verify_locations(cafile)
    except (OSError, ssl.SSLError) as error:
        raise TlsConfigError(f"{where} cafile {cafile}: {error}") from None


class ReloadingContext:
    """An SSLContext built again when one of its files changes (looked at most once a second, when a
    connection asks); a bad new file keeps the context built before, with an error logged."""

    def __init__(self, build: Callable[[], ssl.SSLContext], files: Iterable[Path], what: str) -> None:
        self._build = build
        self._files = [WatchedFile(path) for path in files]
        self._what = what
        self._context = build()
        self._checked_at = time.monotonic()

    def get(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked_at >= RECHECK_INTERVAL_S:
            self._checked_at = now
            if any([watched.changed() for watched in self._files]):  # a list: every stamp is brought up to date
                try:
                    self._context = self._build()
                    log.info("reloaded the %s certificates", self._what)
                except TlsConfigError as error:
                    log.error("keeping the loaded %s certificates: %s", self._what, error)
        return self._context


def peer_principal_name(ssl_object: Any, mapper: PrincipalMapper) -> tuple[str | None, str | None]:
    """(the mapped name, the subject) of a verified client certificate; (None, None) without one."""
    certificate = ssl_object.getpeercert() if ssl_object is not None else None
    if not certificate:
        return None, None
    subject = subject_name(certificate)
    return mapper.name(subject), subject
