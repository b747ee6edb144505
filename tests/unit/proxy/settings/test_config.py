from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cluster.fleet import FleetSettings
from proxy.producer_ids.settings import AllocatorSettings
from proxy.settings.config import AuthorizerSettings, ConfigError, HostPort
from proxy.settings.loading import build_parser, load_config


def load(*argv: str):  # type: ignore[no-untyped-def]
    return load_config(build_parser().parse_args(list(argv)))


def test_defaults() -> None:
    config = load("--upstream", "a:1,b:2")
    assert config.upstream == (HostPort("a", 1), HostPort("b", 2))
    assert config.listen == HostPort("127.0.0.1", 9092)
    assert config.broker_port_base == 9093
    assert config.advertised_host == "127.0.0.1"
    assert config.max_frame_bytes == 100 * 1024 * 1024
    assert config.idle_timeout_s == 600


def test_file_settings_and_flags_win(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('upstream = ["x:1", "y:2"]\nlisten = "0.0.0.0:7000"\nadvertised-host = "proxy.example"\n'
                    'max-frame-bytes = 1024\n[allocator]\npid_source = "allocator"\n')
    config = load("--config", str(path), "--listen", "127.0.0.1:8000")
    assert config.upstream == (HostPort("x", 1), HostPort("y", 2))
    assert config.listen == HostPort("127.0.0.1", 8000)
    assert config.broker_port_base == 8001
    assert config.advertised_host == "proxy.example"
    assert config.max_frame_bytes == 1024
    assert config.extra == {"allocator": {"pid_source": "allocator"}}


@pytest.mark.parametrize(("content", "message"), [
    ('upstream = "a:1"\nbogus = 1\n', "unknown setting 'bogus'"),
    ('upstream = "a:1"\nidle-timeout-seconds = "soon"\n', "expected a number"),
    ('upstream = "a:1"\nmax-in-flight-requests = 0\n', "must be positive"),
    ('upstream = "a:1"\nlog-level = "LOUD"\n', "log-level"),
    ('upstream = "a:1"\nsplice = "yes"\n', "splice: true or false"),
    ("upstream = \n", "not valid TOML"),
])
def test_bad_files_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load("--config", str(path))


def test_splice_is_on_unless_the_file_or_a_flag_turns_it_off(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('upstream = "a:1"\nsplice = false\n')
    assert load("--upstream", "a:1").splice
    assert not load("--config", str(path)).splice
    assert load("--config", str(path), "--splice").splice
    assert not load("--upstream", "a:1", "--no-splice").splice


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing.toml: cannot read"):
        load("--config", str(tmp_path / "missing.toml"))


@pytest.mark.parametrize(("toml", "message"), [
    ('[allocator]\npid_source = "magic"\n', "pid_source"),
    ('[allocator]\ncluster_principals = "User:a"\n', "a list of principals"),
    ('[allocator]\ncluster_principals = ["alice"]\n', "a list of principals"),
    ('[allocator]\nfirst_id = 10\nend_id = 5\n', "first_id"),
    ('[allocator]\nbootstrap = "nohost"\n', "HOST:PORT"),
    ('[allocator]\nsurprise = 1\n', "unknown key"),
    ('[ledger]\ncache_size = 0\n', "positive"),
    ('[ledger]\nproducer_id_expiration_ms = 0\n', "positive"),
    ('[allocator]\npid_source = "allocator"\n', "broker_id: required"),
    ('[allocator]\nbroker_id = -1\n', "broker_id: 0..2"),
    ('[allocator]\npid_source = "cluster"\nblocks_topic_id = "not-a-uuid"\n', "blocks_topic_id"),
    ('[allocator]\nmode = "proxy"\n', "mode: one of serve, forward"),
    ('[allocator]\nmode = "forward"\npid_source = "allocator"\nbroker_id = 1\n', "pid_source must be"),
])
def test_bad_allocator_settings_are_refused(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('upstream = "127.0.0.1:9"\n' + toml)
    config = load_config(build_parser().parse_args(["--config", str(path)]))
    with pytest.raises(ConfigError, match=message):
        AllocatorSettings.from_config(config)


def test_allocator_settings_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('upstream = "127.0.0.1:9"\n[allocator]\ncluster_principals = ["User:a"]\n'
                    'pid_source = "allocator"\nbroker_id = 7\nbootstrap = "127.0.0.1:9092"\n'
                    '[ledger]\nscan_all_produce = true\n')
    settings = AllocatorSettings.from_config(load_config(build_parser().parse_args(["--config", str(path)])))
    assert settings.cluster_principals == {"User:a"} and settings.pid_source == "allocator"
    assert str(settings.bootstrap) == "127.0.0.1:9092" and settings.scan_all_produce and settings.broker_id == 7


def test_admin_principals_are_kafka_principals(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('upstream = "127.0.0.1:9"\n[admin]\nprincipals = ["User:ops"]\n')
    assert load("--config", str(path)).admin_principals == {"User:ops"}
    path.write_text('upstream = "127.0.0.1:9"\n[admin]\nprincipals = "User:ops"\n')
    with pytest.raises(ConfigError, match=r"\[admin\] principals"):
        load("--config", str(path))


def test_the_authorizer_is_on_only_when_enabled_and_its_settings_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('upstream = "127.0.0.1:9"\n[authorizer]\nenabled = true\nsuper-users = ["User:admin"]\n'
                    'acl-file = "acls.toml"\n')
    assert load("--config", str(path)).authorizer == AuthorizerSettings(frozenset({"User:admin"}), False,
                                                                        Path("acls.toml"))
    path.write_text('upstream = "127.0.0.1:9"\n[authorizer]\nallow-everyone-if-no-acl-found = true\n')
    assert load("--config", str(path)).authorizer is None
    assert load("--upstream", "a:1").authorizer is None
    for bad, named in (('enabled = "yes"', "enabled"), ('super-users = "User:admin"', "super-users"),
                       ("acl-file = 3", "acl-file"), ("enable = true", "unknown key")):
        path.write_text(f'upstream = "127.0.0.1:9"\n[authorizer]\n{bad}\n')
        with pytest.raises(ConfigError, match=rf"\[authorizer\].*{named}"):
            load("--config", str(path))


def test_login_settings(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    users.write_text("")
    config = load("--upstream", "a:1", "--sasl-users", str(users))
    assert config.sasl_mode == "terminate" and config.login.timeout_s == 10 and config.login.failed_delay_s == 0.1
    assert config.login.max_receive_bytes == 512 * 1024 and config.login_threads == 1
    path = tmp_path / "c.toml"
    path.write_text('upstream = "a:1"\nsasl-mode = "inspect"\n[oauthbearer]\n"sub.claim.name" = "upn"\n')
    config = load("--config", str(path), "--sasl-failed-authentication-delay-ms", "0")
    assert (config.sasl_mode, config.login.oauthbearer.sub_claim_name, config.login.failed_delay_s) == (
        "inspect", "upn", 0)
    assert load("--upstream", "a:1").sasl_mode == "none"
    for bad, message in ((("--sasl-mode", "inspect", "--sasl-users", str(users)), "sasl-users"),
                         (("--sasl-mode", "terminate"), "sasl-users"),
                         (("--sasl-users", str(users), "--sasl-failed-authentication-delay-ms", "-1"), "delay")):
        with pytest.raises(ConfigError, match=message):
            load("--upstream", "a:1", *bad)
    path.write_text('upstream = "a:1"\nsasl-mode = "inspect"\noauthbearer-unsecured-jwt = true\n')
    with pytest.raises(ConfigError, match="only with sasl-mode terminate"):
        load("--config", str(path))


def test_tls_tables_are_checked_when_loaded(tmp_path: Path) -> None:
    from tests.certificates import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "pki")
    server = ca.issue("proxy", "proxy", server=True)
    path = tmp_path / "c.toml"

    def with_tables(text: str):  # type: ignore[no-untyped-def]
        path.write_text(f'upstream = "a:1"\n{text}\n')
        return load("--config", str(path))

    config = with_tables(f'[tls]\ncertfile = "{server.certfile}"\nkeyfile = "{server.keyfile}"\n'
                         f'cafile = "{ca.cafile}"\nclient-auth = "required"\n[upstream-tls]\ncafile = "{ca.cafile}"\n'
                         f'check-hostname = false\n[metrics]\nusername = "p"\npassword = "s"\n')
    assert config.tls is not None and config.tls.client_auth == "required"
    assert config.upstream_tls is not None and not config.upstream_tls.check_hostname
    assert config.metrics_endpoint.credentials == "p:s"
    for table, message in (
            (f'[tls]\ncertfile = "{server.certfile}"\nkeyfile = "{ca.cafile}"\n', "certfile/keyfile"),
            (f'[tls]\ncertfile = "{server.certfile}"\nkeyfile = "{server.keyfile}"\nclient-auth = "required"\n',
             "cafile: needed"),
            (f'[tls]\ncertfile = "{server.certfile}"\nkeyfile = "{server.keyfile}"\nmin-version = "1.1"\n',
             "min-version"),
            (f'[tls]\ncertfile = "{server.certfile}"\nkeyfile = "{server.keyfile}"\n'
             'principal-mapping-rules = "RULE:^CN=(.*?)$/$1/LU"\n', "invalid rule"),
            (f'[tls]\ncertfile = "{server.certfile}"\n', "needs keyfile"),
            ('[upstream-tls]\ncafile = "/nonexistent.pem"\n', "cafile /nonexistent.pem"),
            ('[metrics]\npassword = "s"\n', "needs a username")):
        with pytest.raises(ConfigError, match=message):
            with_tables(table)


@pytest.mark.parametrize(("toml", "message"), [
    ('[fleet]\npublish-interval-ms = 0\n', "publish-interval-ms"),
    ('[fleet]\ntopic = ""\n', "topic"),
    ('[fleet]\ninstance_id = "a"\n', "unknown key"),
    ('[fleet]\nquotas-topic = ""\n', "quotas-topic: a topic name"),
    (f'[fleet]\nquotas-topic = "{"q" * 250}"\n', "quotas-topic: a topic name"),
    ('[fleet]\ntopic = "shared"\nquotas-topic = "shared"\n', "a topic each, not one for two"),
    ('[fleet]\nquotas-topic = "q"\nacls-topic = "q"\n', "a topic each, not one for two"),
])
def test_bad_fleet_settings_are_refused(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('upstream = "127.0.0.1:9"\n' + toml)
    with pytest.raises(ConfigError, match=message):
        FleetSettings.from_config(load_config(build_parser().parse_args(["--config", str(path)])))


def test_fleet_members_and_workers(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('upstream = "127.0.0.1:9"\nlisten = "0.0.0.0:9092"\nadvertised-host = "p1"\n[fleet]\n')
    config = load_config(build_parser().parse_args(["--config", str(path), "--workers", "2"]))
    settings = FleetSettings.from_config(config)
    assert settings is not None and settings.topic == "__kafka_quota_proxy_usage"
    assert settings.instance(config) == "p1:9092" and settings.instance(config, 1) == "p1:9092/worker-1"
    assert FleetSettings.from_config(load("--upstream", "127.0.0.1:9")) is None
    with pytest.raises(ConfigError, match=r"\[fleet\]"):
        load("--upstream", "127.0.0.1:9", "--workers", "2")
