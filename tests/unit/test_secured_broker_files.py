"""The secured local broker's files, without a broker: the CA and the server certificate, the SCRAM
credentials handed to the storage tool, the server properties and the users' client files."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtensionOID

from laneway.ops.secured import (
    USERS,
    BrokerSecurity,
    acl_bindings,
    client_properties,
    read_properties,
    scram_credential,
)
from laneway.ops.tls import CertificateAuthority


def test_the_server_certificate_chains_to_the_ca_and_names_loopback() -> None:
    ca = CertificateAuthority.create()
    pair = ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",))
    leaf, issuer = x509.load_pem_x509_certificates(pair.cert_pem.encode())
    assert issuer == ca.cert  # the chain ends with the CA
    leaf.verify_directly_issued_by(ca.cert)
    sans = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert not leaf.extensions.get_extension_for_oid(ExtensionOID.BASIC_CONSTRAINTS).value.ca
    # unencrypted PKCS#8, as Kafka's inline ssl.keystore.key takes it
    assert pair.key_pem.startswith("-----BEGIN PRIVATE KEY-----")
    key = serialization.load_pem_private_key(pair.key_pem.encode(), password=None)
    assert key.public_key() == leaf.public_key()


def test_another_ca_does_not_sign_the_certificate() -> None:
    pair = CertificateAuthority.create().issue("localhost")
    leaf = x509.load_pem_x509_certificates(pair.cert_pem.encode())[0]
    other = CertificateAuthority.create("other")
    try:
        leaf.verify_directly_issued_by(other.cert)
    except Exception as exc:  # InvalidSignature (or ValueError): the point is that it raises
        assert type(exc).__name__ in {"InvalidSignature", "ValueError"}
    else:
        raise AssertionError("a certificate verified against a CA that did not sign it")


def test_scram_credential_is_salted_and_carries_no_password() -> None:
    password = "p4ss-word_xyz"
    arg = scram_credential("app", password)
    pattern = r'SCRAM-SHA-512=\[name=app,iterations=(\d+),salt="([^"]+)",saltedpassword="([^"]+)"\]'
    m = re.fullmatch(pattern, arg)
    assert m is not None, arg
    iterations, salt, salted = int(m[1]), base64.b64decode(m[2]), base64.b64decode(m[3])
    assert iterations >= 4096  # Kafka's minimum for SHA-512
    assert salted == hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    assert password not in arg


def test_security_files_and_properties(tmp_path: Path) -> None:
    sec = BrokerSecurity.create(tmp_path / "security")
    assert stat.S_IMODE((tmp_path / "security").stat().st_mode) == 0o700
    assert len(set(sec.passwords.values())) == len(sec.passwords) == len(USERS) + 1  # + controller
    paths = sec.write_client_configs("127.0.0.1:9999")
    assert set(paths) == set(USERS)
    for user, path in paths.items():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        settings = read_properties(path)
        assert settings == {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": sec.passwords[user],
            "ssl.ca.location": str(tmp_path / "security" / "ca.pem"),
        }
    assert (tmp_path / "security" / "ca.pem").read_text().startswith("-----BEGIN CERTIFICATE-----")
    props = sec.server_properties(9999, 9998)
    lines = dict(line.split("=", 1) for line in props.splitlines() if "=" in line)
    # each PEM block is one properties line, its newlines escaped
    assert lines["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----\\n")
    assert lines["ssl.keystore.certificate.chain"].count("BEGIN CERTIFICATE") == 2
    assert lines["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert lines["super.users"] == "User:admin;User:controller"
    assert lines["listeners"] == "SASL_SSL://127.0.0.1:9999,CONTROLLER://127.0.0.1:9998"
    # the app's and the reader's passwords are in no broker file, not even salted on the command line
    for user in ("app", "reader"):
        assert sec.passwords[user] not in props
        assert all(sec.passwords[user] not in arg for arg in sec.scram_arguments())


def test_client_properties_round_trip(tmp_path: Path) -> None:
    settings = {"sasl.username": "app", "sasl.password": "a=b:c", "ssl.ca.location": "/x/ca.pem"}
    path = tmp_path / "c.properties"
    path.write_text(client_properties(settings, "a comment\nsecond line"))
    assert read_properties(path) == settings


def test_acls_keep_app_and_reader_to_their_prefixes() -> None:
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    grants = {
        (b.principal, b.restype, b.name, b.operation)
        for b in acl_bindings()
        if b.resource_pattern_type == ResourcePatternType.PREFIXED
    }
    assert ("User:app", ResourceType.TOPIC, "app-", AclOperation.WRITE) in grants
    assert ("User:app", ResourceType.GROUP, "app-", AclOperation.READ) in grants
    assert ("User:app", ResourceType.TRANSACTIONAL_ID, "app-", AclOperation.WRITE) in grants
    assert ("User:reader", ResourceType.TOPIC, "app-", AclOperation.READ) in grants
    assert not any(p == "User:reader" and op == AclOperation.WRITE for p, _, _, op in grants)
    assert {name for p, t, name, _ in grants if t == ResourceType.GROUP and p == "User:reader"} == {"reader-"}
    # the tools' own: `dlq show`'s groups, `dlq redrive`'s transactional ids of app-* topics
    tools = ("laneway-tools-", "laneway-redrive-app-")
    assert all(name.startswith(("app-", "reader-", "laneway-app-", *tools)) for _, _, name, _ in grants)
    assert not any(p == "User:reader" and name.startswith(tools) for p, _, name, _ in grants)
