"""laneway.kafka.client_config: the properties format, Java keys into librdkafka's and back into
Spark's ``kafka.`` options, and the one-line errors for files it cannot use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from laneway.errors import ConfigError
from laneway.kafka import client_config as cc
from laneway.kafka import secrets
from laneway.kafka.java_config import spark_options

SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="app" password="s3cr\\"et-pw";'
)


def test_the_properties_format() -> None:
    text = "\n".join(
        [
            "# a comment",
            "! another",
            "   ",
            "security.protocol=SASL_SSL",
            "sasl.mechanism : SCRAM-SHA-512",
            "client.id laneway-ops",
            "  bootstrap.servers = a:9092,\\",
            "      b:9092",
            r"key\=with\:seps=v\tx\u0041",
            "empty=",
            r"path=C:\\certs\\ca.pem",
        ]
    )
    assert cc.parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.id": "laneway-ops",
        "bootstrap.servers": "a:9092,b:9092",
        "key=with:seps": "v\txA",
        "empty": "",
        "path": r"C:\certs\ca.pem",
    }


def test_librdkafka_keys_pass_as_they_are() -> None:
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.location": "/ca",
    }
    assert cc.to_librdkafka(props) == props


def test_java_keys_are_translated() -> None:
    got = cc.to_librdkafka(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "/etc/kafka/ca.pem",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": "/etc/kafka/client.pem",
            "ssl.key.password": "kpw",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert got == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "app",
        "sasl.password": 's3cr"et-pw',
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.certificate.location": "/etc/kafka/client.pem",
        "ssl.key.location": "/etc/kafka/client.pem",
        "ssl.key.password": "kpw",
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_plain_and_oauth_login_modules() -> None:
    plain = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="KEY" password="SECRET";'
    )
    assert cc.to_librdkafka({"sasl.jaas.config": plain}) == {
        "sasl.username": "KEY",
        "sasl.password": "SECRET",
    }
    oauth = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'clientId="cid" clientSecret="csecret" scope="kafka";'
    )
    assert cc.to_librdkafka({"sasl.jaas.config": oauth}) == {
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "cid",
        "sasl.oauthbearer.client.secret": "csecret",
        "sasl.oauthbearer.scope": "kafka",
    }


@pytest.mark.parametrize(
    ("props", "names"),
    [
        ({"ssl.truststore.location": "/x.jks"}, ("ssl.truststore.location", "JKS", "ssl.ca.location")),
        (
            {"ssl.truststore.location": "/x.jks", "ssl.truststore.type": "JKS"},
            ("ssl.truststore.location", "JKS", "PEM"),
        ),
        ({"ssl.keystore.location": "/k.jks"}, ("ssl.keystore.location", "JKS", "ssl.certificate.location")),
        ({"sasl.login.callback.handler.class": "com.X"}, ("sasl.login.callback.handler.class", "Java")),
        ({"value.deserializer": "org.X"}, ("value.deserializer", "remove it")),
        (
            {"sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;"},
            ("IAMLoginModule", "OAUTHBEARER"),
        ),
        ({"sasl.jaas.config": "com.example.Krb5LoginModule required;"}, ("Krb5LoginModule", "sasl.username")),
    ],
)
def test_java_only_keys_fail_naming_the_key_and_what_to_use(
    props: dict[str, str], names: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as info:
        cc.to_librdkafka(props)
    assert info.value.field == "client_config"
    for name in names:
        assert name in str(info.value)
    assert "\n" not in str(info.value)


def test_a_pkcs12_keystore_passes() -> None:
    props = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12", "ssl.keystore.password": "pw"}
    assert cc.to_librdkafka(props) == {"ssl.keystore.location": "/k.p12", "ssl.keystore.password": "pw"}


def test_load_reads_a_file_and_remembers_its_secrets(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    jaas = SCRAM_JAAS.replace('s3cr\\"et-pw', "file-pw-123")
    f.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={jaas}\n")
    got = cc.load_client_config(f)
    assert (got["sasl.username"], got["sasl.password"]) == ("app", "file-pw-123")
    assert secrets.scrub("pw was file-pw-123.") == "pw was [redacted]."


def test_load_errors_are_one_line_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"client_config: no such file: .*missing.properties"):
        cc.load_client_config(tmp_path / "missing.properties")
    bad = tmp_path / "bad.properties"
    bad.write_text("sasl.password=hunter22\nssl.truststore.location=/t.jks\n")
    with pytest.raises(ConfigError) as info:
        cc.load_client_config(bad)
    assert str(bad) in str(info.value) and "ssl.truststore.location" in str(info.value)
    assert "hunter22" not in str(info.value)
    if os.geteuid() != 0:  # root reads every file
        unreadable = tmp_path / "secret.properties"
        unreadable.write_text("a=b\n")
        unreadable.chmod(0)
        with pytest.raises(ConfigError, match=r"cannot read .*secret.properties: Permission denied"):
            cc.load_client_config(unreadable)
    directory = tmp_path / "dir.properties"
    directory.mkdir()
    with pytest.raises(ConfigError, match=r"cannot read .*dir.properties"):
        cc.load_client_config(directory)


def test_spark_options_scram() -> None:
    opts = spark_options(
        {
            "bootstrap.servers": "b:9093",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "app",
            "sasl.password": 'p"w',
            "ssl.ca.location": "/ca.pem",
            "linger.ms": "5",
        }
    )
    assert opts == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="app" password="p\\"w";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/ca.pem",
    }


def test_spark_options_plain_mtls_and_round_trip() -> None:
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "KEY",
        "sasl.password": "SECRET",
    }
    opts = spark_options(settings)
    assert opts["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule"
    )
    # the Java form read back gives the same librdkafka settings
    java = {k.removeprefix("kafka."): v for k, v in opts.items()}
    assert cc.to_librdkafka(java) == settings
    mtls = spark_options(
        {"security.protocol": "SSL", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/c.pem"}
    )
    assert mtls == {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.location": "/c.pem",
    }
    with pytest.raises(ConfigError, match="one PEM file"):
        spark_options({"ssl.certificate.location": "/c.crt", "ssl.key.location": "/c.key"})
    with pytest.raises(ConfigError, match=r"ssl\.engine\.location: Spark's Kafka client has no such setting"):
        spark_options({"ssl.engine.location": "/x"})


def test_using_scopes_the_active_settings() -> None:
    assert cc.active() == {}
    with cc.using({"client.id": "x"}):
        assert cc.active() == {"client.id": "x"}
    assert cc.active() == {}


def test_the_command_settings_reach_the_tools_clients() -> None:
    from laneway.kafka import admin as ka
    from laneway.kafka.producer import Producer

    with cc.using({"security.protocol": "SSL", "client.id": "ops"}):
        conf = ka.client_config("h:1", **{"group.id": "g"})
        assert (conf["security.protocol"], conf["client.id"], conf["group.id"]) == ("SSL", "ops", "g")
        producer = Producer("h:1")
        try:
            assert producer.config["security.protocol"] == "SSL"
        finally:
            producer.close()
    assert "security.protocol" not in ka.client_config("h:1")


def test_a_missing_file_given_to_the_app_names_its_argument(tmp_path: Path) -> None:
    """From the Python API the hint names App's argument, not the command lines' option."""
    from laneway import App

    missing = tmp_path / "nope.properties"
    with pytest.raises(ConfigError) as info:
        App("x", bootstrap_servers="kafka-1:9093", client_config=missing)
    assert str(info.value) == f"client_config: no such file: {missing} (the client_config= argument of App)"
    assert "--client-config" not in str(info.value)


@pytest.mark.parametrize(
    "command", [["topics", "list"], ["lag", "g"], ["catalog", "generate"], ["run", "m:app"]]
)
def test_a_missing_file_is_one_line_and_exit_2(command: list[str], tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from laneway.ops import catalog_cli, kafka_cli, run_cli

    app = typer.Typer(pretty_exceptions_enable=False)
    for module in (run_cli, kafka_cli, catalog_cli):
        module.register(app)
    missing = tmp_path / "nope.properties"
    result = CliRunner().invoke(app, [*command, "--client-config", str(missing)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: --client-config: no such file: {missing} (--client-config / $LANEWAY_CLIENT_CONFIG)"
    ]


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("security.protocol=SASL_SSL\nthis is not a setting\n", 2, 'No such configuration property: "this"'),
        ("[client]\nbootstrap.servers=k:9092\n", 1, 'No such configuration property: "[client]"'),
        (
            "# a comment\n\nsecurity.protocol: PLAINTXT\n",
            3,
            'Invalid value "PLAINTXT" for configuration property',
        ),
        (
            "sasl.password=hunter22\\\n  -more\nlinger.ms=-5\n",
            3,
            '(linger.ms): Configuration property "queue.',
        ),
    ],
)
def test_a_key_librdkafka_refuses_names_the_file_and_line(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    """Such a key failed when the first client was built, as "kafka: No such configuration
    property: ..." with no word of the file it came from."""
    f = tmp_path / "client.properties"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        cc.load_client_config(f)
    said = str(info.value)
    assert said.startswith(f"client_config: {f} line {line}") and says in said, said
    assert "hunter22" not in said


def test_what_only_a_client_s_start_finds_is_left_to_the_clients(tmp_path: Path) -> None:
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")  # read at a client's start, not here
    f = tmp_path / "client.properties"
    f.write_text(f"security.protocol=SSL\nssl.ca.location={garbage}\nbootstrap.servers=k:1\n")
    assert cc.load_client_config(f)["ssl.ca.location"] == str(garbage)


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (["ssl.ca.location=/no/such/ca.pem"], "line 2: ssl.ca.location: no such file: /no/such/ca.pem"),
        (
            ["ssl.certificate.location={tmp}/client.pem", "ssl.key.location={tmp}/gone.key"],
            "line 3: ssl.key.location: no such file: {tmp}/gone.key",
        ),
        (
            ["ssl.truststore.type=PEM", "ssl.truststore.location={tmp}/nope.pem"],  # the Java key
            "line 3: ssl.truststore.location: no such file: {tmp}/nope.pem",
        ),
        (
            ["ssl.keystore.type=PEM", "ssl.keystore.location=client.pem"],  # relative: from the cwd
            "line 3: ssl.keystore.location: no such file: client.pem (from {cwd})",
        ),
        (
            ["ssl.certificate.location={tmp}"],
            "line 2: ssl.certificate.location: {tmp} is a directory, not a file",
        ),
    ],
)
def test_a_missing_certificate_file_names_the_setting_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str], says: str
) -> None:
    """librdkafka said "ssl.ca.location failed: error:...:BIO routines::no such file" when the
    first client started, naming neither the file nor where it was set."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    (tmp_path / "client.pem").write_text("x")
    f = tmp_path / "client.properties"
    f.write_text("\n".join(["security.protocol=SSL", *(line.format(tmp=tmp_path) for line in lines)]) + "\n")
    with pytest.raises(ConfigError) as info:
        cc.load_client_config(f)
    assert str(info.value) == f"client_config: {f} " + says.format(tmp=tmp_path, cwd=cwd)


def test_an_unreadable_certificate_file_is_named(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    key = tmp_path / "client.key"
    key.write_text("x")
    key.chmod(0)
    f = tmp_path / "client.properties"
    f.write_text(f"ssl.key.location={key}\n")
    with pytest.raises(ConfigError, match=rf"line 1: ssl.key.location: cannot read {key}: Permission denied"):
        cc.load_client_config(f)


def test_a_ca_folder_and_the_system_s_cas_are_taken(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    f.write_text(f"security.protocol=SSL\nssl.ca.location={tmp_path}\n")  # librdkafka reads a folder
    assert cc.load_client_config(f)["ssl.ca.location"] == str(tmp_path)
    f.write_text("security.protocol=SSL\nssl.ca.location=probe\n")  # librdkafka probes the system's
    assert cc.load_client_config(f)["ssl.ca.location"] == "probe"


def test_a_missing_certificate_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from laneway.ops import kafka_cli

    app = typer.Typer(pretty_exceptions_enable=False)
    kafka_cli.register(app)
    f = tmp_path / "client.properties"
    f.write_text("security.protocol=SSL\n# the CA\nssl.ca.location=/etc/kafka/missing-ca.pem\n")
    result = CliRunner().invoke(app, ["topics", "list", "--client-config", str(f)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: --client-config: {f} line 3: ssl.ca.location: no such file: /etc/kafka/missing-ca.pem"
    ]


def test_a_refused_key_is_one_line_naming_the_file_and_exit_2(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from laneway.ops import kafka_cli

    app = typer.Typer(pretty_exceptions_enable=False)
    kafka_cli.register(app)
    f = tmp_path / "client.properties"
    f.write_text("security.protocol=SASL_SSL\nsasl.mechanisms SCRAM-SHA-512\nsasl.mechansim=PLAIN\n")
    result = CliRunner().invoke(app, ["topics", "list", "--client-config", str(f)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f'error: --client-config: {f} line 3: No such configuration property: "sasl.mechansim"'
    ]


def test_an_empty_certificate_file_names_its_file_line_and_setting(tmp_path: Path) -> None:
    """librdkafka said "ssl.ca.location failed: ... no certificate or crl found" at the first
    client's start, without the file."""
    empty = tmp_path / "ca.pem"
    empty.write_text("")
    f = tmp_path / "client.properties"
    f.write_text(f"security.protocol=SSL\nssl.ca.location={empty}\n")
    with pytest.raises(ConfigError) as info:
        cc.load_client_config(f)
    assert f"{f} line 2: ssl.ca.location: {empty} is empty" in str(info.value)
    f.write_text("security.protocol=SSL\nssl.ca.location=\n")
    with pytest.raises(ConfigError, match=r"line 2: ssl\.ca\.location: empty"):
        cc.load_client_config(f)


def test_kafka_config_naming_a_missing_or_empty_file_is_refused_when_the_app_starts(tmp_path: Path) -> None:
    """Checked at the start, not when the App is built: a module that builds its App may be
    imported where the certificates are not (a test run, a build)."""
    from laneway import App

    empty = tmp_path / "ca.pem"
    empty.write_text("")
    for value, said in ((str(tmp_path / "nope.pem"), "no such file"), (str(empty), "is empty")):
        app = App("t", bootstrap_servers="127.0.0.1:1", kafka_config={"ssl.ca.location": value})
        app.handler("t")(lambda event: None)
        with pytest.raises(ConfigError) as info:
            app.check()
        assert "kafka_config" in str(info.value) and "ssl.ca.location: " in str(info.value)
        assert said in str(info.value) and value in str(info.value)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("group.id=hijack", "'group.id' is Laneway's to set: use group_id"),
        ("enable.auto.commit=true", "'enable.auto.commit' is Laneway's to set"),
    ],
)
def test_laneway_run_refuses_a_client_config_file_app_would_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, says: str
) -> None:
    """`laneway run --client-config` put the file over the app's kafka_config without the App's
    checks: group.id=... was dropped without a word, where App(client_config=...) refuses it."""
    from typer.testing import CliRunner

    from laneway.ops import cli

    name = f"ccapp{abs(hash(line))}"
    (tmp_path / f"{name}.py").write_text(
        "from laneway import App\napp = App('orders', bootstrap_servers='127.0.0.1:1')\n"
        "@app.handler('t')\ndef h(ev):\n    pass\n"
    )
    conf = tmp_path / "client.properties"
    conf.write_text(f"client.id=tools\n{line}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in cli.app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(cli.app, ["run", f"{name}:app", "--client-config", str(conf)])
    assert result.exit_code == 2, result.output
    errors = [x for x in result.output.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: --client-config: "), result.output
    assert "kafka_config" not in errors[0] and says in errors[0]


@pytest.mark.parametrize("line", ["group.id=hijack", "enable.auto.commit=true"])
def test_a_reserved_key_in_app_s_client_config_file_names_the_file(tmp_path: Path, line: str) -> None:
    """A reserved key from App's client_config file is refused naming client_config, where it came
    from: kafka_config, named before, held no such key."""
    from laneway import App

    conf = tmp_path / "client.properties"
    conf.write_text(f"client.id=tools\n{line}\n")
    with pytest.raises(ConfigError) as info:
        App("orders", bootstrap_servers="127.0.0.1:1", client_config=str(conf))
    key = line.split("=")[0]
    assert info.value.field == "client_config"
    assert str(info.value).startswith(f"client_config: {key!r} is Laneway's to set"), str(info.value)
    with pytest.raises(ConfigError) as given:  # the same key given in kafka_config names kafka_config
        App("orders", bootstrap_servers="127.0.0.1:1", kafka_config={key: line.split("=")[1]})
    assert given.value.field == "kafka_config"


def test_laneway_run_client_config_keeps_the_app_s_own_file_s_producer_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's own client_config file may hold producer keys (a shared file); a --client-config
    of other keys was refused naming them (the re-check held every key not in its file to the rule)."""
    from typer.testing import CliRunner

    from laneway.ops import cli

    shared = tmp_path / "shared.properties"
    shared.write_text("client.id=foo\nlinger.ms=5\n")
    name = "ccshared"
    (tmp_path / f"{name}.py").write_text(
        "from laneway import App\n"
        f"app = App('orders', bootstrap_servers='127.0.0.1:1', client_config={str(shared)!r})\n"
        "@app.handler('t')\ndef h(ev):\n    pass\n"
    )
    conf = tmp_path / "client.properties"
    conf.write_text("client.id=tools\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in cli.app.registered_commands):
        cli._register_subcommands()
    from laneway.app import App

    started: list[dict[str, object]] = []
    # the start itself is not this test's: no broker answers at 127.0.0.1:1 (a 10 s wait)
    monkeypatch.setattr(App, "run", lambda self, **_: started.append(dict(self.settings.kafka_config)))
    result = CliRunner().invoke(cli.app, ["run", f"{name}:app", "--client-config", str(conf)])
    assert "--client-config: kafka_config" not in result.output, result.output
    assert result.exit_code == 0, result.output
    assert len(started) == 1 and started[0]["client.id"] == "tools"  # the file's over the app's
