"""The settings reference (docs/settings.md) and the command line are made from the settings' definitions; these
hold them to it, and each default shown to the value the proxy really uses without the setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli.settings_reference import ALL_TABLES, render
from proxy.cluster.fleet import FleetSettings
from proxy.cluster.usage_topic import UsageTopicSettings
from proxy.producer_ids.settings import AllocatorSettings
from proxy.settings.config import ConfigError
from proxy.settings.definitions import SETTINGS, Setting, Table, TableKey, shown
from proxy.settings.loading import build_parser, load_config
from tests.certificates import CertificateAuthority

REFERENCE = Path(__file__).resolve().parents[4] / "docs" / "settings.md"


def test_the_committed_reference_is_what_the_definitions_make() -> None:
    assert REFERENCE.read_text() == render(), \
        "docs/settings.md is stale: run python -m proxy.cli.settings_reference --write docs/settings.md"


def test_every_flag_is_a_defined_setting_and_every_setting_with_a_flag_has_one() -> None:
    flags = {option for action in build_parser()._actions for option in action.option_strings
             if option.startswith("--") and not option.startswith("--no-")}
    assert flags - {f"--{setting.key}" for setting in SETTINGS} == {"--help", "--version", "--config"}
    assert {f"--{setting.key}" for setting in SETTINGS if setting.flag} <= flags
    assert all(f"--{setting.key}" not in flags for setting in SETTINGS if not setting.flag)


@pytest.mark.parametrize("setting", [setting for setting in SETTINGS if setting.default is not None],
                         ids=lambda setting: setting.key)
def test_a_default_shown_is_the_value_used_without_the_setting(setting: Setting, tmp_path: Path) -> None:
    """The setting written in --config with the value the reference shows changes nothing."""
    given = tmp_path / "given.toml"
    given.write_text(f'upstream = "cluster:9092"\n{setting.key} = {json.dumps(setting.default)}\n')
    assert load_config(build_parser().parse_args(["--config", str(given)])) == \
        load_config(build_parser().parse_args(["--upstream", "cluster:9092"]))


def test_a_default_unlike_the_one_used_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a value other than the default changes the configuration."""
    given = tmp_path / "given.toml"
    given.write_text('upstream = "cluster:9092"\nidle-timeout-seconds = 601\n')
    assert load_config(build_parser().parse_args(["--config", str(given)])) != \
        load_config(build_parser().parse_args(["--upstream", "cluster:9092"]))


def test_sizes_are_shown_in_bytes_and_mib() -> None:
    assert shown(4 << 20) == "4194304 (4 MiB)" and shown(True) == "true" and shown(600.0) == "600"


def _with_table(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}-{abs(hash(body))}.toml"
    path.write_text(f'upstream = "cluster:9092"\n[{name}]\n{body}')
    return path


def _table_keys(tmp_path: Path) -> list[tuple[Table, TableKey, str]]:
    """Every key with a value default of every table, with what its table needs besides (a listener's TLS needs a
    certificate)."""
    issued = CertificateAuthority(tmp_path / "pki").issue("proxy", "proxy", server=True)
    needs = {"tls": f'certfile = "{issued.certfile}"\nkeyfile = "{issued.keyfile}"\n'}
    return [(table, key, needs.get(table.name, "")) for table in ALL_TABLES for key in table.keys
            if key.default is not None]


def _read(path: Path, table: str) -> object:
    """What the proxy makes of the file: its configuration, or the settings the table's room reads from it."""
    config = load_config(build_parser().parse_args(["--config", str(path)]))
    if table == "fleet":
        return FleetSettings.from_config(config)
    if table == "usage":
        return UsageTopicSettings.from_config(config)
    if table in ("allocator", "ledger"):
        return AllocatorSettings.from_config(config)
    return config


def test_each_table_key_default_shown_is_the_value_used_without_it(tmp_path: Path) -> None:
    checked = 0
    for table, key, needs in _table_keys(tmp_path):
        given = _with_table(tmp_path, table.name, f"{needs}{key.key} = {json.dumps(key.default)}\n")
        assert _read(given, table.name) == _read(_with_table(tmp_path, table.name, needs), table.name), \
            f"[{table.name}] {key.key}"
        checked += 1
    assert checked >= 15


def test_a_key_no_table_definition_names_is_refused(tmp_path: Path) -> None:
    for table in ALL_TABLES:
        with pytest.raises(ConfigError, match=f"\\[{table.name}\\].*(unknown key|exactly the key)"):
            _read(_with_table(tmp_path, table.name, 'undocumented = "x"\n'), table.name)
