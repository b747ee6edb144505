"""Where every benchmark puts its figures."""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any


def write_results(path: str | Path, results: dict[str, Any]) -> None:
    """Write ``results`` as JSON to ``path`` and echo it, so a run's figures are kept and seen."""
    text = json.dumps(results, indent=2)
    Path(path).write_text(text + "\n")
    print(text)


def case_arguments(description: str | None, default_out: str) -> argparse.Namespace:
    """``--out`` (the results file) and ``--only`` (case names) of a benchmark made of named cases."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=default_out)
    parser.add_argument("--only", nargs="*", help="case names (all when not given)")
    return parser.parse_args()


def new_results() -> dict[str, Any]:
    """Results to fill case by case, headed by the machine they were measured on."""
    return {"machine": {"python": platform.python_version(), "platform": platform.platform()}, "cases": {}}
