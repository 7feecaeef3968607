"""One secured broker for every test in this directory (SASL_SSL, SCRAM-SHA-512, ACLs).

``secure_broker`` starts :class:`laneway.ops.broker.LocalBroker` with ``secure=True``: users
``admin`` (super user), ``app`` (topics and groups ``app-*``) and ``reader`` (reads ``app-*``,
groups ``reader-*``), see :mod:`laneway.ops.secured`. It also writes bad client files: a wrong
password, an unknown user, a CA the broker's certificate does not chain to.

The directory is skipped when ``LANEWAY_BOOTSTRAP`` names an external cluster: its users,
passwords and ACLs are not ours to create.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from laneway.ops.broker import LocalBroker
from laneway.ops.secured import USERS, client_properties, read_properties, write_private
from laneway.ops.tls import CertificateAuthority


class SecureBroker:
    """The running secured broker, as the tests see it."""

    def __init__(self, broker: LocalBroker, scratch: Path) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.scratch = scratch

    def config_path(self, user: str) -> Path:
        """The client file the launcher wrote for ``user`` (admin, app, reader)."""
        return self.broker.config_path(user)

    def settings(self, user: str) -> dict[str, str]:
        """``user``'s librdkafka settings without ``bootstrap.servers``: an App's ``kafka_config``."""
        return read_properties(self.config_path(user))

    def client(self, user_or_file: str | Path) -> dict[str, str]:
        """Settings for a confluent-kafka client: ``bootstrap.servers`` and a user's (or a file's)."""
        path = user_or_file if isinstance(user_or_file, Path) else self.config_path(user_or_file)
        return {"bootstrap.servers": self.bootstrap, **read_properties(path)}

    @property
    def passwords(self) -> dict[str, str]:
        """Every password the broker knows (the users' and the internal controller's)."""
        assert self.broker.security is not None
        return dict(self.broker.security.passwords)

    def _variant(self, name: str, **changes: str) -> Path:
        settings = {**self.settings("app"), **changes}
        return write_private(self.scratch / f"{name}.properties", client_properties(settings))

    def wrong_password_file(self) -> Path:
        return self._variant("wrong-password", **{"sasl.password": "not-" + self.passwords["app"][:8]})

    def unknown_user_file(self) -> Path:
        return self._variant("unknown-user", **{"sasl.username": "nobody"})

    def untrusted_ca_file(self) -> Path:
        """The app's credentials, trusting a second CA that did not sign the broker's certificate."""
        other = CertificateAuthority.create("Another throwaway CA").write(self.scratch / "other-ca.pem")
        return self._variant("untrusted-ca", **{"ssl.ca.location": str(other)})


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    if os.environ.get("LANEWAY_BOOTSTRAP"):
        pytest.skip(
            "LANEWAY_BOOTSTRAP points to an external cluster: the security tests need a broker whose "
            "users, passwords and ACLs they create themselves (laneway broker start --secure)"
        )
    with LocalBroker.create(secure=True) as broker:
        assert set(USERS) == {"admin", "app", "reader"}
        yield SecureBroker(broker, tmp_path_factory.mktemp("secure-clients"))


@pytest.fixture(scope="session")
def secure_admin(secure_broker: SecureBroker) -> AdminClient:
    return AdminClient(secure_broker.client("admin"))


AppTopicFactory = Callable[..., str]


@pytest.fixture
def app_topic(secure_admin: AdminClient) -> Iterator[AppTopicFactory]:
    """Create uuid-named topics (``app-<hex>`` by default) as admin; delete them afterwards."""
    created: list[str] = []

    def make(partitions: int = 3, prefix: str = "app", name: str | None = None) -> str:
        name = name or f"{prefix}-{uuid.uuid4().hex[:10]}"
        fs = secure_admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        fs[name].result(timeout=30)
        created.append(name)
        deadline = time.monotonic() + 30
        while True:  # KRaft: the broker serves the new topic's metadata a moment after the controller
            topic = secure_admin.list_topics(name, timeout=10).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return name
            assert time.monotonic() < deadline, f"topic {name} not in the metadata after 30 s"
            time.sleep(0.05)

    yield make
    if created:
        for f in secure_admin.delete_topics(created, operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(timeout=30)
