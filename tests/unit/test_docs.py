"""The documentation site (mkdocs.yml, docs/) builds with MkDocs in strict mode: a broken link, a missing page or
a page left out of the navigation fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

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
