"""A throwaway certificate authority and server certificates, for the secured local broker.

Keys are ECDSA P-256 (quick to make, accepted by Java's TLS and by librdkafka's OpenSSL).
Certificates are PEM; private keys are unencrypted PKCS#8 PEM, which Kafka reads inline
(``ssl.keystore.type=PEM`` with ``ssl.keystore.key``), so no keytool or JKS is needed.

    ca = CertificateAuthority.create()
    server = ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",))
    ca.write(directory / "ca.pem")

Nothing here is meant for a real cluster: the CA's key lives only in memory and each
start makes a new one.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "KeyPair"]

_SKEW = dt.timedelta(minutes=5)  # valid a little before now: clocks of the JVM and the client may differ


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM (the key unencrypted PKCS#8)."""

    cert_pem: str
    key_pem: str


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Laneway local broker"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _pkcs8(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA that issues server certificates."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, common_name: str = "Laneway throwaway CA", *, days: int = 30) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        name = _name(common_name)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key=key, cert=cert)

    @property
    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def write(self, path: Path) -> Path:
        """Write the CA certificate (public) to ``path``; the CA's key is never written."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.cert_pem)
        return path

    def issue(
        self,
        common_name: str,
        *,
        dns: Sequence[str] = ("localhost",),
        ips: Sequence[str] = ("127.0.0.1",),
        days: int = 30,
    ) -> KeyPair:
        """A server certificate for ``dns`` names and ``ips`` (its subject alternative names)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        chain = cert.public_bytes(serialization.Encoding.PEM).decode() + self.cert_pem
        return KeyPair(cert_pem=chain, key_pem=_pkcs8(key))
