"""The settings reference, made from the settings' definitions (``proxy.settings.definitions``, and the tables
of the rooms that read their own: ``[fleet]``, ``[usage]``, ``[allocator]``, ``[ledger]``):
``python -m proxy.cli.settings_reference`` prints it, ``--write PATH`` writes it (``docs/settings.md``, which a test
holds equal to what this makes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from proxy.cluster.fleet import FLEET_TABLE
from proxy.cluster.usage_topic import USAGE_TABLE
from proxy.producer_ids.settings import ALLOCATOR_TABLE, LEDGER_TABLE
from proxy.settings.definitions import SETTINGS, TABLES, Setting, Table, TableKey, default_text

ALL_TABLES: tuple[Table, ...] = (*TABLES, FLEET_TABLE, USAGE_TABLE, ALLOCATOR_TABLE, LEDGER_TABLE)

HEADER = """# Settings reference

<!-- Made by `python -m proxy.cli.settings_reference --write docs/settings.md` from the settings' definitions
(proxy/settings/definitions.py and the [fleet], [usage], [allocator] and [ledger] tables of their rooms); a test
fails when this file and the definitions disagree. Edit the definitions, then run the command. -->

Each setting is a flag and a key of the `--config` TOML file (top level): the key is the flag's name without its
dashes (`--idle-timeout-seconds 60` or `idle-timeout-seconds = 60`), and a flag wins over the file. The defaults are
the values the proxy uses when the setting is given neither way.

| setting | default | meaning |
|---|---|---|
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(setting: Setting | TableKey) -> str:
    text = default_text(setting)
    return _cell(text) if setting.default is None else f"`{text}`"


def render() -> str:
    rows = [f"| {f'`--{setting.key}`' if setting.flag else f'`{setting.key}` (`--config` only)'} | "
            f"{_default(setting)} | {_cell(setting.meaning)} |" for setting in SETTINGS]
    text = HEADER + "\n".join(rows) + "\n\n`--config PATH` names the file; `--version` prints the version.\n"
    text += ("\n## Tables of the `--config` file\n\nSubsystems read their own table; a key a table does not have is "
             "refused.\n")
    for table in ALL_TABLES:
        text += f"\n### `[{table.name}]`\n\n{table.purpose[0].upper()}{table.purpose[1:]}.\n\n"
        text += "| key | default | meaning |\n|---|---|---|\n"
        text += "".join(f"| `{key.key}` | {_default(key)} | {_cell(key.meaning)} |\n" for key in table.keys)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proxy.cli.settings_reference", description=__doc__)
    parser.add_argument("--write", type=Path, help="write the reference to this file instead of printing it")
    args = parser.parse_args(argv)
    if args.write is None:
        print(render(), end="")
    else:
        args.write.write_text(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
