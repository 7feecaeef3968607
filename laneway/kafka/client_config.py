"""Client settings from a Java-style properties file, as Kafka's own tools take ``--command-config``.

    settings = load_client_config("client.properties")   # librdkafka settings
    App("orders", bootstrap_servers=..., kafka_config=settings)

The file may give librdkafka keys (``sasl.username``, ``ssl.ca.location``), which pass as they
are, or the Java client's keys, which are translated:

* ``sasl.jaas.config`` with the SCRAM or PLAIN login module: ``sasl.username``, ``sasl.password``;
  with the OAuthBearer login module and ``clientId``/``clientSecret``: librdkafka's OIDC settings;
* ``ssl.truststore.location`` with ``ssl.truststore.type=PEM``: ``ssl.ca.location``
  (``ssl.truststore.certificates``: ``ssl.ca.pem``);
* ``ssl.keystore.location`` with ``ssl.keystore.type=PEM`` (one file, key and certificate):
  ``ssl.certificate.location`` and ``ssl.key.location``; a PKCS12 keystore passes as it is;
* ``ssl.endpoint.identification.algorithm`` empty: ``none``;
* ``metadata.broker.list``, librdkafka's other name of ``bootstrap.servers``: ``bootstrap.servers``,
  so that it comes after ``--bootstrap`` (and the App's ``bootstrap_servers``) as that one does.
  A file giving both is refused (the one a client was given last won without a word).

A Java-only key librdkafka cannot take (a JKS truststore, a callback class) is a
:class:`~laneway.errors.ConfigError` naming the key and what to use instead; so is a file a key
names (a CA, a certificate, a key) that is missing or cannot be read, with the file and line.
The command lines read the file named by ``--client-config`` or ``$LANEWAY_CLIENT_CONFIG``
(:data:`ENV_VAR`) and make it the settings of every client the command builds (:func:`using`,
:func:`active`).
:mod:`laneway.kafka.java_config` turns the settings back into the Java client's, for Spark.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Final

from confluent_kafka import KafkaException, Producer

from laneway.errors import ConfigError
from laneway.kafka import secrets

__all__ = [
    "API_ARGUMENT",
    "BROKER_KEYS",
    "CLI_OPTION",
    "ENV_VAR",
    "FILE_KEYS",
    "active",
    "empty_broker_list",
    "file_problem",
    "load_client_config",
    "parse_properties",
    "to_librdkafka",
    "using",
]

#: the environment variable the command lines read when ``--client-config`` is not given
ENV_VAR: Final = "LANEWAY_CLIENT_CONFIG"
#: where a file came from, as :func:`load_client_config`'s hint names it: the Python API's
#: argument (``App(client_config=...)``) or the command lines' option and variable
API_ARGUMENT: Final = "the client_config= argument of App"
CLI_OPTION: Final = f"--client-config / ${ENV_VAR}"

_FIELD: Final = "client_config"

#: the two names librdkafka takes for the brokers to connect to first
BROKER_KEYS: Final = ("bootstrap.servers", "metadata.broker.list")
#: librdkafka's other name of ``bootstrap.servers``: a file's is read as ``bootstrap.servers``
_ALIAS: Final = "metadata.broker.list"

#: Java-only keys librdkafka has no use for, and what to do instead
JAVA_ONLY: Final[dict[str, str]] = {
    "sasl.login.callback.handler.class": "librdkafka cannot load Java classes: use sasl.oauthbearer.* "
    "(docs/security.md)",
    "sasl.client.callback.handler.class": "librdkafka cannot load Java classes: remove it",
    "sasl.login.class": "librdkafka cannot load Java classes: remove it",
    "key.serializer": "Laneway serializes records itself: remove it",
    "value.serializer": "Laneway serializes records itself: remove it",
    "key.deserializer": "Laneway hands handlers the bytes (or JSON): remove it",
    "value.deserializer": "Laneway hands handlers the bytes (or JSON): remove it",
    "ssl.protocol": "librdkafka negotiates the TLS version: remove it",
    "ssl.enabled.protocols": "librdkafka negotiates the TLS version: remove it",
    "ssl.keymanager.algorithm": "remove it (a Java setting)",
    "ssl.trustmanager.algorithm": "remove it (a Java setting)",
    "ssl.secure.random.implementation": "remove it (a Java setting)",
    "ssl.engine.factory.class": "librdkafka cannot load Java classes: remove it",
    "security.providers": "librdkafka cannot load Java classes: remove it",
    "interceptor.classes": "librdkafka cannot load Java classes: remove it",
}

_active: ContextVar[Mapping[str, Any] | None] = ContextVar("laneway_client_config", default=None)


# -- the properties format -----------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """The file's logical lines with the number of the line each starts on: comments and
    blank lines dropped, continuations joined."""
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        start = start if pending else number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes: the line goes on
            pending += line[:-1]
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """A Java properties text as a dict: ``key=value``, ``key: value`` or ``key value``,
    ``#``/``!`` comments, ``\\`` continuations and escapes (``\\t``, ``\\uXXXX``, ``\\=``)."""
    return {key: value for key, (value, _) in _parse(text).items()}


def _parse(text: str, repeated: list[tuple[str, int, int]] | None = None) -> dict[str, tuple[str, int]]:
    """:func:`parse_properties` with the number of the line each key's value came from; a key
    set again goes into ``repeated`` as (key, its first line, the later one)."""
    out: dict[str, tuple[str, int]] = {}
    for number, line in _logical_lines(text):
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key, rest = line[:i], line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        name = _unescape(key)
        if repeated is not None and name in out:
            repeated.append((name, out[name][1], number))
        out[name] = (_unescape(rest), number)
    return out


# -- Java keys into librdkafka's ----------------------------------------------------------------

_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>\w+)(?P<options>.*?);?\s*$", re.DOTALL)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def _jaas_options(text: str) -> tuple[str, dict[str, str]]:
    match = _JAAS.match(text)
    if match is None:
        raise ConfigError(_FIELD, "sasl.jaas.config: expected 'LoginModule required key=\"value\" ...;'")
    options = {
        m.group(1): re.sub(r"\\(.)", r"\1", m.group(2)) if m.group(2) is not None else m.group(3)
        for m in _JAAS_OPTION.finditer(match.group("options"))
    }
    return match.group("module").rsplit(".", 1)[-1], options


def _from_jaas(text: str) -> dict[str, str]:
    module, options = _jaas_options(text)
    if module in ("ScramLoginModule", "PlainLoginModule"):
        missing = [k for k in ("username", "password") if k not in options]
        if missing:
            raise ConfigError(_FIELD, f"sasl.jaas.config: {module} without {' and '.join(missing)}")
        return {"sasl.username": options["username"], "sasl.password": options["password"]}
    if module == "OAuthBearerLoginModule":
        if "clientId" not in options:  # the unsecured JWT module of tests
            return {"enable.sasl.oauthbearer.unsecure.jwt": "true"}
        out = {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": options["clientId"]}
        if "clientSecret" in options:
            out["sasl.oauthbearer.client.secret"] = options["clientSecret"]
        if "scope" in options:
            out["sasl.oauthbearer.scope"] = options["scope"]
        return out
    if module == "IAMLoginModule":
        raise ConfigError(
            _FIELD,
            "sasl.jaas.config: AWS MSK IAM (IAMLoginModule) is a Java plug-in librdkafka does not have: use "
            "sasl.mechanism=OAUTHBEARER with a token callback in App(kafka_config={'oauth_cb': ...}), "
            "or SCRAM (docs/security.md)",
        )
    raise ConfigError(
        _FIELD,
        f"sasl.jaas.config: login module {module} has no librdkafka equivalent: give sasl.username and "
        "sasl.password (SCRAM, PLAIN) or sasl.oauthbearer.* instead",
    )


def _pem_only(props: Mapping[str, str], kind: str, key: str) -> None:
    store = props.get(f"ssl.{kind}.type", "JKS" if f"ssl.{kind}.location" in props else "PEM").upper()
    if store != "PEM" and not (kind == "keystore" and store == "PKCS12"):
        instead = (
            "convert it to PEM (keytool -exportcert -rfc) and set ssl.truststore.type=PEM, "
            "or give ssl.ca.location"
            if kind == "truststore"
            else "convert it to PKCS12 or PEM, or give ssl.certificate.location and ssl.key.location"
        )
        raise ConfigError(_FIELD, f"{key}: librdkafka cannot read a {store} {kind}: {instead}")


def to_librdkafka(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` (a properties file's keys) as librdkafka settings; see the module's docstring."""
    out: dict[str, str] = {}
    for key, value in props.items():
        if key in JAVA_ONLY:
            raise ConfigError(
                _FIELD, f"{key} is a Java client setting librdkafka has no use for: {JAVA_ONLY[key]}"
            )
        if key == "sasl.jaas.config":
            out.update(_from_jaas(value))
        elif key in ("ssl.truststore.type", "ssl.keystore.type"):
            continue
        elif key == "ssl.truststore.password":
            _pem_only(props, "truststore", key)  # a PEM truststore has no password: nothing to pass
        elif key == "ssl.truststore.location":
            _pem_only(props, "truststore", key)
            out["ssl.ca.location"] = value
        elif key == "ssl.truststore.certificates":
            out["ssl.ca.pem"] = value
        elif key == "ssl.keystore.location":
            _pem_only(props, "keystore", key)
            if props.get("ssl.keystore.type", "").upper() == "PEM":
                out["ssl.certificate.location"] = out["ssl.key.location"] = value
            else:
                out[key] = value
        elif key == "ssl.keystore.certificate.chain":
            out["ssl.certificate.pem"] = value
        elif key == "ssl.keystore.key":
            out["ssl.key.pem"] = value
        elif key == "ssl.endpoint.identification.algorithm" and not value.strip():
            out[key] = "none"
        else:
            out[key] = value
    return out


def load_client_config(path: str | Path, *, given_by: str = API_ARGUMENT) -> dict[str, str]:
    """The librdkafka settings of the properties file at ``path``; a :class:`ConfigError`
    naming the file when it cannot be read, the key when one cannot be translated, and the
    file and line when librdkafka refuses a key (unknown, or a value it cannot take) or when a
    file a key names (``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``,
    their Java forms, :data:`FILE_KEYS`) is missing or cannot be read. A
    missing file's error names ``given_by``, where the path came from: the Python API's
    ``client_config=`` argument (the default) or, from the command lines, :data:`CLI_OPTION`.
    The file's secrets are noted for the log scrub (:func:`laneway.kafka.secrets.remember`).
    From the command lines the error's field is ``--client-config``, as the user gave it; from
    the API, ``client_config``."""
    field = "--client-config" if given_by == CLI_OPTION else _FIELD
    if not str(path).strip():  # Path("") is ".", and read as a directory
        raise ConfigError(
            field, f"must not be empty: give the path of a properties file, or leave it out ({given_by})"
        )
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(field, f"no such file: {p} ({given_by})") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(field, f"cannot read {p}: {why}") from None
    repeated: list[tuple[str, int, int]] = []
    parsed = _parse(text, repeated)
    if repeated:  # Java keeps the last one silently: almost always an edit that went wrong
        key, first, again = repeated[0]
        raise ConfigError(field, f"{p} line {again}: {key} is set again (first on line {first}): keep one")
    props = {key: value for key, (value, _) in parsed.items()}
    if empty := empty_broker_list(props):
        key, why = empty
        raise ConfigError(field, f"{p} line {parsed[key][1]}: {why}")
    if both := _both_broker_keys(parsed):
        raise ConfigError(field, f"{p} {both}")
    try:
        settings = to_librdkafka(props)
    except ConfigError as exc:
        raise ConfigError(field, f"{p}: {secrets.scrub(exc.reason, secrets.secret_values(props))}") from None
    if missing := _file_problem(p, parsed):
        raise ConfigError(field, missing)
    if refused := _refused(settings):
        key, why = refused
        where = f"{p} line {parsed[key][1]}" if key in parsed else str(p)
        if f'"{key}"' not in why:  # librdkafka named another key (linger.ms: queue.buffering.max.ms)
            where += f" ({key})"
        raise ConfigError(field, f"{where}: {secrets.scrub(why, secrets.secret_values(props))}")
    if _ALIAS in settings:  # one name, so that --bootstrap and bootstrap_servers come before it
        settings["bootstrap.servers"] = settings.pop(_ALIAS)
    secrets.remember(settings)
    return settings


def _both_broker_keys(parsed: Mapping[str, tuple[str, int]]) -> str | None:
    """The error's text (``line N: ...``) when the file gives both :data:`BROKER_KEYS`: they are one
    librdkafka setting under two names, and the one set last in a client's settings won without a
    word (a command's admin client went to the file's ``metadata.broker.list``, its reachability
    check and its messages to ``--bootstrap``); None when it gives one or neither."""
    if not all(key in parsed for key in BROKER_KEYS):
        return None
    (first, first_line), (second, second_line) = sorted(
        ((key, parsed[key][1]) for key in BROKER_KEYS), key=lambda item: item[1]
    )
    return (
        f"line {second_line}: {second} is {first} (line {first_line}) under another name: "
        f"librdkafka takes one of the two; keep one (bootstrap.servers)"
    )


def empty_broker_list(settings: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first of :data:`BROKER_KEYS` that ``settings`` give empty (or blanks), with the
    error's text (``<key>: must not be empty: ...``); None when none is. Taken as unset, an
    empty one let the command lines go to ``--bootstrap``, ``$LANEWAY_BOOTSTRAP`` or the
    recorded broker without a word, and the App to its ``bootstrap_servers``."""
    for key in BROKER_KEYS:
        value = settings.get(key)
        if isinstance(value, str) and not value.strip():
            return key, f"{key}: must not be empty: give host:port[,host:port], or remove the setting"
    return None


#: the keys (librdkafka's and the Java client's) whose value is a file the clients read at start;
#: a directory is a CA location too (librdkafka reads the certificates in it)
FILE_KEYS: Final = (
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.keystore.location",
    "ssl.truststore.location",
    "ssl.crl.location",
)
_DIRECTORY_OK: Final = frozenset({"ssl.ca.location", "ssl.truststore.location"})


def file_problem(key: str, value: object) -> str | None:
    """What is wrong with the file a file setting names (missing, unreadable, empty, or a
    directory where a file is needed), as ``<key>: <why>``; None when it can be read, or when
    ``key`` names no file. librdkafka said only "BIO routines::no such file" or "no certificate
    or crl found" when the client started, without the file's name. A relative path is read
    from the current folder, as librdkafka reads it."""
    if key not in FILE_KEYS or not isinstance(value, str):
        return None
    if key == "ssl.ca.location" and value.strip() == "probe":  # librdkafka: the system's CAs
        return None
    target = Path(value)
    shown = value if target.is_absolute() else f"{value} (from {Path.cwd()})"
    why = None
    try:
        if not value.strip():
            why = "empty: name the file, or remove the setting"
        elif target.is_dir():
            if key not in _DIRECTORY_OK:
                why = f"{shown} is a directory, not a file"
            elif not os.access(target, os.R_OK | os.X_OK):
                why = f"cannot read {shown}: Permission denied"
        else:
            with target.open("rb") as f:
                if not f.read(1):
                    why = f"{shown} is empty"
    except FileNotFoundError:
        why = f"no such file: {shown}"
    except OSError as exc:
        why = f"cannot read {shown}: {exc.strerror or type(exc).__name__}"
    return f"{key}: {why}" if why else None


def _file_problem(path: Path, parsed: Mapping[str, tuple[str, int]]) -> str | None:
    """The first file setting of the properties file at ``path`` whose file cannot be used
    (:func:`file_problem`), as ``<file> line N: <key>: <why>``; None when every one can."""
    for key, (value, line) in sorted(parsed.items(), key=lambda item: item[1][1]):
        if why := file_problem(key, value):
            return f"{path} line {line}: {why}"
    return None


def _refused(settings: Mapping[str, str]) -> tuple[str, str] | None:
    """The first key librdkafka refuses by itself (unknown, or a value it cannot take), with its
    text; None when it takes every one. A client is built to ask (librdkafka has no other way)
    without ``bootstrap.servers``, so it connects nowhere; what only a client's start finds (a
    certificate file's content, a pair of settings that clash) is left to the clients the file
    is for. A missing or unreadable file is :func:`_file_problem`'s."""
    quiet = logging.getLogger("laneway.kafka.client_config.check")
    quiet.setLevel(logging.CRITICAL)  # "a consumer property, ignored by this producer"

    def refusal(conf: Mapping[str, str]) -> str | None:
        try:
            Producer({k: v for k, v in conf.items() if k != "bootstrap.servers"}, logger=quiet)
        except KafkaException as exc:
            text = secrets.refusal_text(exc)
            return None if text.startswith("Failed to create") else text.strip()
        return None

    if refusal(settings) is None:
        return None
    for key, value in settings.items():  # which one: librdkafka may name another (an alias)
        if (why := refusal({key: value})) is not None:
            return key, why
    return None


# -- the settings of the command running now ------------------------------------------------------


def active() -> dict[str, Any]:
    """The client settings of the command running now (empty outside :func:`using`)."""
    return dict(_active.get() or {})


@contextmanager
def using(settings: Mapping[str, Any]) -> Iterator[None]:
    """Make ``settings`` the ones :func:`active` returns while the block runs: the command lines
    give every client they build the ``--client-config`` file's settings this way."""
    token = _active.set(dict(settings))
    try:
        yield
    finally:
        _active.reset(token)
