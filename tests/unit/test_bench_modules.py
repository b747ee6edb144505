"""``make bench`` runs outside CI: every benchmark module must at least import, or a rename elsewhere breaks a
benchmark unnoticed until its next run (``bench.workers`` once imported a constant ``bench.run`` no longer had)."""

import importlib
import pkgutil

import pytest

import bench


@pytest.mark.parametrize("name", sorted(module.name for module in pkgutil.iter_modules(bench.__path__)))
def test_the_benchmark_module_imports(name: str) -> None:
    assert importlib.import_module(f"bench.{name}").__doc__
