"""The documentation site (mkdocs.yml, docs/) builds with MkDocs in strict mode: a broken link, a missing page or
a page left out of the navigation fails here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from bench.docs import fidelity_table, page_with_table, plot_cpu, plot_fidelity, plot_throughput

ROOT = Path(__file__).resolve().parents[2]


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(root / "mkdocs.yml"), "--site-dir", str(site)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def nav_pages(entries: list[object]) -> set[str]:
    pages: set[str] = set()
    for entry in entries:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            pages |= nav_pages(value) if isinstance(value, list) else {str(value)}
    return pages


def test_the_site_builds_strictly_with_every_page_in_its_navigation(tmp_path: Path) -> None:
    built = build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    assert nav_pages(config["nav"]) == {page.name for page in (ROOT / "docs").glob("*.md")}
    assert (tmp_path / "site" / "settings" / "index.html").exists()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    with open(copy / "docs" / "index.md", "a") as page:
        page.write("\nSee [a page that is not there](missing.md).\n")
    built = build(copy, tmp_path / "site")
    assert built.returncode != 0 and "missing.md" in built.stdout + built.stderr


def test_the_fidelity_page_holds_the_committed_results_table() -> None:
    """docs/fidelity.md's table is what ``python -m bench.docs`` makes of bench/fidelity-results.json."""
    page = (ROOT / "docs" / "fidelity.md").read_text()
    results = json.loads((ROOT / "bench" / "fidelity-results.json").read_text())
    assert page_with_table(page, fidelity_table(results)) == page, "run python -m bench.docs"
    changed = json.loads(json.dumps(results))
    next(iter(changed["cases"].values()))["elapsed_ratio"] = 1.5
    assert page_with_table(page, fidelity_table(changed)) != page


def test_the_benchmark_plots_are_drawn_from_the_results(tmp_path: Path) -> None:
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    plot_throughput(results, tmp_path)
    plot_cpu(results, json.loads((ROOT / "bench" / "relay-floor-results.json").read_text()), tmp_path)
    plot_fidelity(json.loads((ROOT / "bench" / "fidelity-results.json").read_text()), tmp_path)
    drawn = sorted(path.name for path in tmp_path.iterdir())
    assert drawn == sorted(path.name for path in (ROOT / "docs" / "img").glob("*.png"))
    pages = "".join(page.read_text() for page in (ROOT / "docs").glob("*.md"))
    assert all(f"(img/{name})" in pages for name in drawn)  # each plot shown on a page
