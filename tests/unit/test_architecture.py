"""The house as drawn: which package may import which, read from the code itself.

Each room of proxy/ says in its docstring what it may import (``May import: ...``); these tests hold
every module to its room's line, keep the rooms free of cycles, and keep the pure packages pure.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("protocol", "quotas", "allocator", "proxy", "pipeline")
EVENT_LOOP = ("asyncio", "uvloop")
ROOMS = sorted(path.parent.name for path in (ROOT / "proxy").glob("*/__init__.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _type_checking_only(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(tree: ast.AST, package: list[str], at_run_time: bool) -> Iterator[str]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking_only(node) and at_run_time:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, node.module] if node.module else base)
            yield source
            # ``from proxy.dev import apache_kafka`` imports the module proxy.dev.apache_kafka
            yield from (f"{source}.{alias.name}" for alias in node.names
                        if (ROOT / Path(*source.split("."), alias.name)).with_suffix(".py").exists())
        else:
            yield from _imports(node, package, at_run_time)


@cache
def imports_of(path: Path, at_run_time: bool = False) -> frozenset[str]:
    """Every module ``path`` imports, functions' bodies included; at run time: not the ones only a type
    checker reads (``if TYPE_CHECKING:``)."""
    package = module_name(path).split(".") if path.name == "__init__.py" else module_name(path).split(".")[:-1]
    return frozenset(_imports(ast.parse(path.read_text()), package, at_run_time))


def room_of(module: str) -> str:
    """``proxy.connection.client`` -> ``proxy.connection``; ``quotas.rate`` -> ``quotas``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "proxy" and len(parts) > 1 and parts[1] in ROOMS else parts[0]


def may_import(room: str) -> set[str]:
    """The rooms and packages named on the ``May import:`` line of the room's docstring."""
    docstring = ast.get_docstring(ast.parse((ROOT / Path(*room.split(".")) / "__init__.py").read_text())) or ""
    found = re.search(r"^May import: (.*?)\.$", docstring, re.M | re.S)
    assert found, f"{room}'s docstring has no 'May import: ...' line"
    named = re.sub(r"\s*\(.*?\)", "", found.group(1).replace("\n", " "))  # without the reasons in brackets
    return set() if named == "nothing of ours" else {name.strip() for name in named.split(",")}


def ours(module: str) -> bool:
    return module.split(".")[0] in OURS


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_says_what_lives_there_and_what_it_may_import(room: str) -> None:
    allowed = may_import(f"proxy.{room}")
    unknown = {name for name in allowed if name not in OURS and room_of(name) != name}
    assert not unknown, f"proxy.{room} names rooms that do not exist: {unknown}"
    docstring = ast.get_docstring(ast.parse((ROOT / "proxy" / room / "__init__.py").read_text())) or ""
    assert len(docstring.split("May import:")[0].split()) >= 10, f"proxy.{room} does not say what lives there"


def test_proxy_has_rooms_only() -> None:
    loose = sorted(path.name for path in (ROOT / "proxy").glob("*.py")
                   if path.name not in ("__init__.py", "__main__.py"))
    assert not loose, f"modules outside a room of proxy/: {loose}"


@pytest.mark.parametrize("room", ROOMS)
def test_every_module_imports_only_what_its_room_may(room: str) -> None:
    allowed = may_import(f"proxy.{room}") | {f"proxy.{room}"}
    wrong = {f"{module_name(path)} imports {target}"
             for path in modules(f"proxy/{room}") for target in imports_of(path)
             if ours(target) and target != "proxy" and room_of(target) not in allowed}
    assert not wrong, sorted(wrong)


def test_the_rooms_stand_on_floors() -> None:
    """What the rooms may import has no cycle, so neither do the imports the test above allows."""
    allowed = {f"proxy.{room}": may_import(f"proxy.{room}") for room in ROOMS}
    placed: set[str] = set(OURS) - {"proxy"}
    while len(placed) < len(placed | allowed.keys()):
        floor = {room for room, below in allowed.items() if room not in placed and below <= placed}
        assert floor, f"rooms that import each other: {sorted(set(allowed) - placed)}"
        placed |= floor


def test_no_module_imports_itself_round_a_circle() -> None:
    graph = {module_name(path): {target for target in imports_of(path, at_run_time=True) if ours(target)}
             for package in OURS for path in modules(package)}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in done or module not in graph:
            return
        assert module not in visiting, " -> ".join([*visiting[visiting.index(module):], module])
        visiting.append(module)
        for target in graph[module]:
            visit(target)
        visiting.pop()
        done.add(module)

    for module in graph:
        visit(module)


@pytest.mark.parametrize(("importer", "forbidden"), [
    ("proxy/handlers", "proxy.connection"),
    ("proxy/connection", "proxy.handlers"),
    ("protocol", "proxy"), ("quotas", "proxy"), ("allocator", "proxy"), ("pipeline", "proxy"),
    ("quotas", "protocol"), ("quotas", "allocator"), ("protocol", "asyncio"), ("quotas", "asyncio"),
])
def test_the_arrows_that_must_never_be_drawn(importer: str, forbidden: str) -> None:
    wrong = {f"{module_name(path)} imports {target}" for path in modules(importer) for target in imports_of(path)
             if target == forbidden or target.startswith(f"{forbidden}.")}
    assert not wrong, sorted(wrong)


def test_the_pipeline_never_imports_the_event_loop() -> None:
    """Not itself, nor through anything of ours it imports."""
    reached: set[str] = set()
    pending = [module_name(path) for path in modules("pipeline")]
    while pending:
        module = pending.pop()
        if module in reached:
            continue
        reached.add(module)
        path = ROOT / Path(*module.split("."))
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if not source.exists():
            continue
        loop = {target for target in imports_of(source) if target.split(".")[0] in EVENT_LOOP}
        assert not loop, f"{module} (reached from pipeline/) imports {sorted(loop)}"
        pending.extend(target for target in imports_of(source) if ours(target))
