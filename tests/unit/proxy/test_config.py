from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config import ConfigError, HostPort, build_parser, load_config
from proxy.producer_ids import AllocatorSettings


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
    ("upstream = \n", "not valid TOML"),
])
def test_bad_files_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load("--config", str(path))


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
                    'pid_source = "allocator"\nbootstrap = "127.0.0.1:9092"\n[ledger]\nscan_all_produce = true\n')
    settings = AllocatorSettings.from_config(load_config(build_parser().parse_args(["--config", str(path)])))
    assert settings.cluster_principals == {"User:a"} and settings.pid_source == "allocator"
    assert str(settings.bootstrap) == "127.0.0.1:9092" and settings.scan_all_produce


def test_admin_principals_are_kafka_principals(tmp_path: Path) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('upstream = "127.0.0.1:9"\n[admin]\nprincipals = ["User:ops"]\n')
    assert load("--config", str(path)).admin_principals == {"User:ops"}
    path.write_text('upstream = "127.0.0.1:9"\n[admin]\nprincipals = "User:ops"\n')
    with pytest.raises(ConfigError, match=r"\[admin\] principals"):
        load("--config", str(path))
