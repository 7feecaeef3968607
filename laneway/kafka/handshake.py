"""A connection the broker closed during the handshake: the likely ``security.protocol`` mismatch.

A listener of another protocol drops the client's connection instead of answering it: a TLS or
SASL listener a plaintext client's first request (the ApiVersion query), a SASL_SSL listener an
SSL client's first request after the TLS handshake. librdkafka only says the connection closed
(and keeps retrying); :func:`closed_at_handshake` reads its text, :func:`mismatch` says what
was given and what the listener likely needs (:func:`laneway.kafka.access.classify`'s line).
"""

from __future__ import annotations

from typing import Final

__all__ = ["closed_at_handshake", "mismatch"]

#: the protocols without TLS: a client of these at a TLS listener gets a closed connection
_PLAIN: Final = frozenset({"PLAINTEXT", "SASL_PLAINTEXT"})

#: what a listener that closed the connection at the handshake likely needs, by the
#: security.protocol given: (what is missing, the protocol that has it, and its settings)
_NEEDS: Final = {
    "PLAINTEXT": ("TLS or SASL", "SASL_SSL, SSL or SASL_PLAINTEXT"),
    "SASL_PLAINTEXT": ("TLS", "SASL_SSL, with ssl.ca.location"),
    "SSL": ("SASL", "SASL_SSL, with sasl.mechanism, sasl.username and sasl.password"),
}


def _closed_at_first_request(lowered: str) -> bool:
    """librdkafka's text for a connection the broker dropped at the client's first request (the
    ApiVersion query): a TLS or SASL listener does that to a client that speaks neither. The
    answer a TLS listener sends (an alert) reads as an impossible response size."""
    first_request = "state apiversion_query" in lowered or "requesting apiversion" in lowered
    closed = "connection closed by peer" in lowered or "receive 0 after pollin" in lowered
    return first_request and (closed or "invalid response size" in lowered)


def _closed_when_up(lowered: str) -> bool:
    """librdkafka's text for a TLS connection the broker dropped after the TLS handshake and the
    ApiVersion query, at the first request (``SSL connection closed by peer (after 24ms in state
    UP)``): a SASL_SSL listener does that to an SSL client, which never authenticates."""
    return "ssl connection closed by peer" in lowered and "in state up" in lowered


def closed_at_handshake(protocol: str, lowered: str) -> bool:
    """True when ``lowered`` (librdkafka's text, lower case) is a connection the broker answered
    but closed during the handshake, as a listener of another protocol than ``protocol`` does."""
    if protocol in _PLAIN:
        return _closed_at_first_request(lowered)
    return protocol == "SSL" and _closed_when_up(lowered)


def mismatch(protocol: str) -> str:
    """The likely mismatch, naming the protocol given and what the listener likely needs."""
    others = [p for p in ("SASL_SSL", "SSL", "SASL_PLAINTEXT", "PLAINTEXT") if p != protocol]
    missing, protocols = _NEEDS.get(protocol, ("another one", f"{', '.join(others[:-1])} or {others[-1]}"))
    return (
        f"the listener likely needs a different security.protocol: security.protocol is {protocol}, "
        f"but the listener likely needs {missing} ({protocols})"
    )
