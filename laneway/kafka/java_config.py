"""librdkafka settings as the Java client's, for Spark's Kafka source (``kafka.``-prefixed).

    options = spark_options(settings)    # {"kafka.security.protocol": "SASL_SSL", ...}

The reverse of :mod:`laneway.kafka.client_config`: ``sasl.username`` and ``sasl.password``
become ``sasl.jaas.config`` with the login module of the mechanism (PLAIN or SCRAM),
``ssl.ca.location`` a PEM truststore, one PEM file of key and certificate a PEM keystore.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from laneway.errors import ConfigError

__all__ = ["spark_options"]

_FIELD: Final = "client_config"

_LOGIN_MODULES: Final = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: librdkafka keys the Java client has under the same name
_SAME_IN_JAVA: Final = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.kerberos.service.name",
        "sasl.oauthbearer.token.endpoint.url",
        "ssl.cipher.suites",
        "ssl.key.password",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "client.rack",
        "client.dns.lookup",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "socket.connection.setup.timeout.ms",
    }
)
#: consumed by the translation below
_TRANSLATED: Final = frozenset(
    {
        "bootstrap.servers",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.ca.pem",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.certificate.pem",
        "ssl.key.pem",
        "ssl.endpoint.identification.algorithm",
        "sasl.oauthbearer.method",
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.scope",
    }
)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _java(settings: Mapping[str, Any]) -> dict[str, str]:
    s = {k: str(v) for k, v in settings.items() if not callable(v)}
    out = {k: v for k, v in s.items() if k in _SAME_IN_JAVA}
    mechanism = s.get("sasl.mechanism", "GSSAPI" if "sasl.username" not in s else "PLAIN").upper()
    if "sasl.username" in s:
        module = _LOGIN_MODULES.get(mechanism)
        if module is None:
            raise ConfigError(
                _FIELD, f"sasl.username: Spark's Kafka client takes it with PLAIN or SCRAM, not {mechanism}"
            )
        out["sasl.mechanism"] = mechanism
        out["sasl.jaas.config"] = (
            f"{module} required username={_quoted(s['sasl.username'])} "
            f"password={_quoted(s.get('sasl.password', ''))};"
        )
    if s.get("sasl.oauthbearer.method", "").lower() == "oidc":
        options = [f"clientId={_quoted(s.get('sasl.oauthbearer.client.id', ''))}"]
        if "sasl.oauthbearer.client.secret" in s:
            options.append(f"clientSecret={_quoted(s['sasl.oauthbearer.client.secret'])}")
        if "sasl.oauthbearer.scope" in s:
            options.append(f"scope={_quoted(s['sasl.oauthbearer.scope'])}")
        out["sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            + " ".join(options)
            + ";"
        )
        out["sasl.login.callback.handler.class"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
        )
    if "ssl.ca.location" in s:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": s["ssl.ca.location"]})
    if "ssl.ca.pem" in s:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": s["ssl.ca.pem"]})
    cert, key = s.get("ssl.certificate.location"), s.get("ssl.key.location")
    if cert or key:
        if cert != key:
            raise ConfigError(
                _FIELD,
                "ssl.certificate.location and ssl.key.location: Spark's Kafka client reads the key and "
                "the certificate from one PEM file: put both in one (cat client.crt client.key > "
                "client.pem) and name it in both",
            )
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert)})
    if "ssl.certificate.pem" in s or "ssl.key.pem" in s:
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.certificate.chain"] = s.get("ssl.certificate.pem", "")
        out["ssl.keystore.key"] = s.get("ssl.key.pem", "")
    if "ssl.keystore.location" in s and "ssl.keystore.type" not in out:
        out["ssl.keystore.type"] = "PKCS12"
    algorithm = s.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm
    for k in s:
        if k not in out and k not in _TRANSLATED and k.startswith(("sasl.", "ssl.", "security.")):
            raise ConfigError(_FIELD, f"{k}: Spark's Kafka client has no such setting")
    return out


def spark_options(settings: Mapping[str, Any]) -> dict[str, str]:
    """``settings`` (librdkafka's) as the options of Spark's Kafka source: the Java client's
    keys with the ``kafka.`` prefix (``kafka.sasl.jaas.config`` built from ``sasl.username`` and
    ``sasl.password``, ``kafka.ssl.truststore.*`` from ``ssl.ca.location``). Security keys it
    cannot translate are a :class:`ConfigError`; librdkafka's tuning keys are left out."""
    return {f"kafka.{k}": v for k, v in _java(settings).items()}
