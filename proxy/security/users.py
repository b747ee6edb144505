"""The users the proxy logs in itself (``sasl-users``): per user and mechanism, only what a server needs
to verify a password. For SCRAM the salt, iteration count, StoredKey and ServerKey; for PLAIN a salted
PBKDF2 hash. Never the password. Read and written as TOML (``kafka-quota-proxy users``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from allocator.durable import write_durably
from proxy.files.toml_file import read_toml

PLAIN = "PLAIN"
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = (PLAIN, *SCRAM_HASHES)
DEFAULT_ITERATIONS = {PLAIN: 100_000, "SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 8192}
MIN_SCRAM_ITERATIONS = 4096  # RFC 7677 and Kafka's ScramMechanism minimum
MAX_SCRAM_ITERATIONS = 16384  # Kafka's ScramMechanism maximum: a Kafka cluster stores no credential above it


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
    salted = hashlib.pbkdf2_hmac(digest, saslprep(password), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", digest)
    return ScramCredential(salt, iterations, hashlib.new(digest, client_key).digest(),
                           hmac.digest(salted, b"Server Key", digest))


def plain_credential(password: str, iterations: int | None = None) -> PlainCredential:
    salt = secrets.token_bytes(16)
    iterations = iterations or DEFAULT_ITERATIONS[PLAIN]
    return PlainCredential(salt, iterations, hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations))


def saslprep(password: str) -> bytes:
    # Full SASLprep (RFC 4013) maps and forbids rare code points; Kafka's Java clients send the
    # UTF-8 bytes as they are, which is what this proxy verifies against.
    return password.encode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: Any, where: str) -> bytes:
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
    salt = unb64(fields["salt"], where)
    if mechanism == PLAIN:
        return PlainCredential(salt, iterations, unb64(fields["hash"], where))
    return ScramCredential(salt, iterations, unb64(fields["stored_key"], where),
                           unb64(fields["server_key"], where))


def _credential_fields(credential: Credential) -> dict[str, str | int]:
    if isinstance(credential, PlainCredential):
        return {"salt": b64(credential.salt), "iterations": credential.iterations, "hash": b64(credential.hash)}
    return {"salt": b64(credential.salt), "iterations": credential.iterations,
            "stored_key": b64(credential.stored_key), "server_key": b64(credential.server_key)}


def save_users(path: Path, store: UserStore) -> None:
    """Write the users file atomically, readable by its owner only (tomli-w quotes any user name as TOML
    wants it: JSON's escapes are not TOML's for characters beyond the Basic Multilingual Plane)."""
    users = {name: {mechanism: _credential_fields(store.users[name][mechanism])
                    for mechanism in MECHANISMS if mechanism in store.users[name]}
             for name in sorted(store.users)}
    header = "# kafka-quota-proxy users (written by `kafka-quota-proxy users add`)\n\n"
    write_durably(path, (header + tomli_w.dumps({"users": users})).encode(), mode=0o600)
