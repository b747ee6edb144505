"""Reading a TOML file, with an error naming the file and what is wrong with it."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


def read_toml(path: Path, error: type[Exception]) -> dict[str, Any]:
    """The parsed document; raises ``error`` when the file cannot be read or is not TOML."""
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as failure:
        raise error(f"{path}: cannot read: {failure.strerror}") from failure
    except tomllib.TOMLDecodeError as failure:
        raise error(f"{path}: not valid TOML: {failure}") from failure
