"""The fuzz targets (``tests/fuzz``) in the test suite: every seed and past finding replayed through its target, and
each target fuzzed for a few seconds under atheris (``make fuzz`` runs each for ten minutes)."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
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


def fuzzed(name: str, directory: Path) -> str | None:
    """``name`` fuzzed for ``SMOKE_SECONDS`` from its corpus; what went wrong, or None."""
    corpus = directory / name
    corpus.mkdir()
    done = subprocess.run([sys.executable, "-m", "tests.fuzz.run", "--ours-only", name,
                           f"-max_total_time={SMOKE_SECONDS}", f"-artifact_prefix={corpus}-", str(corpus),
                           str(CORPUS / name)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    found = [path.name for path in directory.glob(f"{name}-crash-*")]
    if done.returncode or found or not re.search(r"^Done \d+ runs", done.stderr, re.M):
        return f"{name}: exit {done.returncode}, {found}\n{done.stderr[-3000:]}"
    return None


def test_each_target_survives_seconds_of_fuzzing(tmp_path: Path) -> None:
    """Two targets at a time, one a core: the instrumented import takes as long as the fuzzing."""
    with ThreadPoolExecutor(2) as pool:
        problems = [problem for problem in pool.map(lambda name: fuzzed(name, tmp_path), sorted(TARGETS)) if problem]
    assert not problems, "\n".join(problems)
