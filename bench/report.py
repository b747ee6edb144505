"""Where every benchmark puts its figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(path: str | Path, results: dict[str, Any]) -> None:
    """Write ``results`` as JSON to ``path`` and echo it, so a run's figures are kept and seen."""
    text = json.dumps(results, indent=2)
    Path(path).write_text(text + "\n")
    print(text)
