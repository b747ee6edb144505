"""Certificates made at test time: a CA, a server certificate for 127.0.0.1 and client certificates."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Issued:
    certfile: Path
    keyfile: Path


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COUNTRY_NAME, "US"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme")]
    if unit is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


class CertificateAuthority:
    def __init__(self, directory: Path, name: str = "test-ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = _name(name)
        now = datetime.datetime.now(datetime.UTC)
        self._certificate = (x509.CertificateBuilder().subject_name(self._name).issuer_name(self._name)
                             .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                             .not_valid_before(now - datetime.timedelta(days=1))
                             .not_valid_after(now + datetime.timedelta(days=30))
                             .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                             .sign(self._key, hashes.SHA256()))
        self.cafile = directory / f"{name}.pem"
        self.cafile.write_bytes(self._certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, file_stem: str, common_name: str, unit: str | None = None, server: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(_name(common_name, unit)).issuer_name(self._name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=30)))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        issued = Issued(self.directory / f"{file_stem}.pem", self.directory / f"{file_stem}.key")
        issued.certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        issued.keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
        return issued
