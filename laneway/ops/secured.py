"""The security of the secured local broker: users, certificates, listeners, ACLs, client files.

``laneway broker start --secure`` (and :class:`laneway.ops.broker.LocalBroker` with
``secure=True``) serves clients on one SASL_SSL listener (SCRAM-SHA-512, a certificate from a
throwaway CA, :mod:`laneway.ops.tls`), authorizes with KRaft's ``StandardAuthorizer``, and
knows three users, each with a random password per start:

========  ==========================================================================
admin     super user (it also carries the broker's own inter-broker connections)
app       topics ``app-*`` (read, write, describe, create, describe configs: its
          dead-letter topics ``app-*.dlq`` too), groups ``app-*`` (read, describe) and
          ``laneway-tools-*`` (read: ``dlq show``), transactional ids ``app-*``,
          ``laneway-app-*`` (exactly-once) and ``laneway-redrive-app-*``, idempotent write
reader    topics ``app-*`` (read, describe), groups ``reader-*`` (read, describe)
========  ==========================================================================

The controller listener (loopback, brokers only) speaks SASL_PLAINTEXT with PLAIN and a
fourth, internal user ``controller``. Passwords appear in two places only: the broker's
``server.properties`` and the per-user client files (``admin.properties``,
``app.properties``, ``reader.properties``, mode 0600), Java-style properties with librdkafka
keys, beside the CA certificate ``ca.pem``. The SCRAM credentials reach the storage tool
salted, so no password is ever on a command line.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from laneway.ops.tls import CertificateAuthority, KeyPair

if TYPE_CHECKING:
    from confluent_kafka.admin import AclBinding

__all__ = [
    "ADMIN",
    "MECHANISM",
    "USERS",
    "BrokerSecurity",
    "acl_bindings",
    "client_properties",
    "read_properties",
    "scram_credential",
    "write_private",
]

logger = logging.getLogger(__name__)

ADMIN: Final = "admin"
#: the users a secured broker knows, each with a client file ``<user>.properties``
USERS: Final[tuple[str, ...]] = (ADMIN, "app", "reader")
MECHANISM: Final = "SCRAM-SHA-512"
#: the internal user of the controller listener (PLAIN; not for clients)
_CONTROLLER_USER: Final = "controller"
_SCRAM_ITERATIONS: Final = 4096  # Kafka's minimum for SCRAM-SHA-512

_LISTENERS = """\
listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=SASL_SSL://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT
sasl.enabled.mechanisms={mechanism}
sasl.mechanism.inter.broker.protocol={mechanism}
listener.name.sasl_ssl.sasl.enabled.mechanisms={mechanism}
listener.name.sasl_ssl.{mechanism_lower}.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required \
username="{admin}" password="{admin_password}";
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required \
username="{controller}" password="{controller_password}" user_{controller}="{controller_password}";
ssl.keystore.type=PEM
ssl.keystore.certificate.chain={chain}
ssl.keystore.key={key}
ssl.truststore.type=PEM
ssl.truststore.certificates={ca}
ssl.client.auth=none
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:{admin};User:{controller}
allow.everyone.if.no.acl.found=false
"""


def write_private(path: Path, text: str | bytes) -> Path:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600), from the first byte."""
    data = text.encode() if isinstance(text, str) else text
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
        os.write(fd, data)
    finally:
        os.close(fd)
    return path


def _one_line(pem: str) -> str:
    """A PEM block as one properties value: Java's ``Properties.load`` reads ``\\n`` as a newline."""
    return pem.strip().replace("\n", "\\n")


def scram_credential(name: str, password: str, *, iterations: int = _SCRAM_ITERATIONS) -> str:
    """The storage tool's ``--add-scram`` argument for ``name``, salted (RFC 5802's Hi)."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    b64 = base64.b64encode
    return (
        f"{MECHANISM}=[name={name},iterations={iterations},"
        f'salt="{b64(salt).decode()}",saltedpassword="{b64(salted).decode()}"]'
    )


def client_properties(settings: dict[str, str], comment: str = "") -> str:
    """``settings`` as a Java-style properties file (one ``key=value`` a line)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [f"{k}={v}" for k, v in settings.items()]
    return "\n".join(lines) + "\n"


def read_properties(path: Path) -> dict[str, str]:
    """The ``key=value`` lines of a properties file this module wrote (comments skipped)."""
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class BrokerSecurity:
    """The CA, the broker's certificate and the passwords of one secured broker.

    Made once per broker (its SCRAM credentials live in the formatted metadata log, so a
    restart over the same data directory keeps them).
    """

    directory: Path
    ca: CertificateAuthority
    server: KeyPair
    passwords: dict[str, str]

    @classmethod
    def create(cls, directory: Path) -> BrokerSecurity:
        """New CA, server certificate (SAN: 127.0.0.1 and localhost) and random passwords."""
        ca = CertificateAuthority.create()
        server = ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",))
        passwords = {user: secrets.token_urlsafe(24) for user in (*USERS, _CONTROLLER_USER)}
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        ca.write(directory / "ca.pem")
        return cls(directory=directory, ca=ca, server=server, passwords=passwords)

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.pem"

    def config_path(self, user: str) -> Path:
        """The client file of ``user`` (``admin``, ``app`` or ``reader``)."""
        if user not in USERS:
            raise KeyError(f"unknown user {user!r}; the secured broker knows {', '.join(USERS)}")
        return self.directory / f"{user}.properties"

    def server_properties(self, port: int, controller_port: int) -> str:
        """The listener, TLS, SASL and authorizer lines of the broker's ``server.properties``."""
        return _LISTENERS.format(
            port=port,
            controller_port=controller_port,
            mechanism=MECHANISM,
            mechanism_lower=MECHANISM.lower(),
            admin=ADMIN,
            admin_password=self.passwords[ADMIN],
            controller=_CONTROLLER_USER,
            controller_password=self.passwords[_CONTROLLER_USER],
            chain=_one_line(self.server.cert_pem),
            key=_one_line(self.server.key_pem),
            ca=_one_line(self.ca.cert_pem),
        )

    def scram_arguments(self) -> list[str]:
        """``--add-scram`` arguments for the storage tool: one salted credential per user."""
        args: list[str] = []
        for user in USERS:
            args += ["--add-scram", scram_credential(user, self.passwords[user])]
        return args

    def settings(self, user: str) -> dict[str, str]:
        """librdkafka settings for ``user`` (without ``bootstrap.servers``)."""
        self.config_path(user)  # names the users on a typo
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.passwords[user],
            "ssl.ca.location": str(self.ca_path),
        }

    def write_client_configs(self, bootstrap: str) -> dict[str, Path]:
        """Write each user's client file (mode 0600); returns the paths by user."""
        out: dict[str, Path] = {}
        for user in USERS:
            comment = f"laneway broker start --secure: user {user!r}\nbootstrap.servers: {bootstrap}"
            out[user] = write_private(self.config_path(user), client_properties(self.settings(user), comment))
        return out

    def create_acls(self, bootstrap: str, timeout: float = 30.0) -> int:
        """Grant ``app`` and ``reader`` their ACLs, as ``admin``; returns how many bindings."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap, **self.settings(ADMIN)}, logger=_quiet_logger())
        bindings = acl_bindings()
        for binding, future in admin.create_acls(bindings, request_timeout=timeout).items():
            future.result(timeout=timeout)
            logger.debug("acl %s", binding)
        return len(bindings)


def acl_bindings() -> list[AclBinding]:
    """The ACLs of ``app`` and ``reader`` (the table in this module's docstring)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    allow = AclPermissionType.ALLOW
    prefixed = ResourcePatternType.PREFIXED
    grants: list[tuple[str, ResourceType, str, ResourcePatternType, AclOperation]] = []
    topic_ops = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)
    for op in (*topic_ops, AclOperation.DESCRIBE_CONFIGS):  # DescribeConfigs: `topics describe`
        grants.append(("app", ResourceType.TOPIC, "app-", prefixed, op))
    # the tools' own groups and redrive transactions (`dlq show`, `dlq redrive`, docs/security.md)
    grants.append(("app", ResourceType.GROUP, "laneway-tools-", prefixed, AclOperation.READ))
    for op in (AclOperation.READ, AclOperation.DESCRIBE):
        grants.append(("app", ResourceType.GROUP, "app-", prefixed, op))
        grants.append(("reader", ResourceType.TOPIC, "app-", prefixed, op))
        grants.append(("reader", ResourceType.GROUP, "reader-", prefixed, op))
    # laneway-<group>-...: the App's default id; laneway-redrive-<dlq>: `dlq redrive`
    for txn_prefix in ("app-", "laneway-app-", "laneway-redrive-app-"):
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE):
            grants.append(("app", ResourceType.TRANSACTIONAL_ID, txn_prefix, prefixed, op))
    grants.append(
        (
            "app",
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            AclOperation.IDEMPOTENT_WRITE,
        )
    )
    return [
        AclBinding(rtype, name, pattern, f"User:{user}", "*", op, allow)
        for user, rtype, name, pattern, op in grants
    ]


def _quiet_logger() -> logging.Logger:
    quiet = logging.getLogger("laneway.ops.secured.admin")
    quiet.setLevel(logging.CRITICAL)
    return quiet
