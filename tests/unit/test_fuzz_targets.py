"""The fuzz targets (``tests/fuzz``) in the test suite: every seed and past finding replayed through its target, and
each target fuzzed for a few seconds under atheris (``make fuzz`` runs each for ten minutes)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.seeds import CORPUS
from tests.fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]
SMOKE_SECONDS = 2


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_seed_and_past_finding_passes_its_target(name: str) -> None:
    inputs = sorted((CORPUS / name).iterdir())
    assert any(path.name.startswith("seed-") for path in inputs), f"no seeds for {name}"
    for path in inputs:
        TARGETS[name](path.read_bytes())


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_each_target_survives_seconds_of_fuzzing(name: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.fuzz.run", "--ours-only", name,
                           f"-max_total_time={SMOKE_SECONDS}", f"-artifact_prefix={tmp_path}/", str(tmp_path),
                           str(CORPUS / name)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    found = [path.name for path in tmp_path.glob("crash-*")]
    assert done.returncode == 0 and not found, f"{name}: {found}\n{done.stderr[-4000:]}"
    assert re.search(r"^Done \d+ runs", done.stderr, re.M), done.stderr[-2000:]
