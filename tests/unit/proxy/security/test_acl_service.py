from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from allocator.durable import WriteErrors
from proxy.security.acl_service import AclService, read_changes
from proxy.security.acls import AclBinding, AclOperation, AclPermission, PatternType, ResourceType


def acl(name: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                      AclPermission.ALLOW)


def file_of(*names: str) -> str:
    return "".join(f'[[acl]]\nprincipal = "User:alice"\nresource-type = "topic"\nresource-name = "{name}"\n'
                   f'operations = ["read"]\n' for name in names)


def rewritten(path: Path, text: str) -> None:
    """``text`` in ``path``, noticed as a change whatever the clock's resolution (another size, a later time)."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_the_file_reloaded_keeps_the_apis_changes_over_it_and_a_bad_one_keeps_all(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    acl_file = tmp_path / "acls.toml"
    acl_file.write_text(file_of("a", "b"))
    service = AclService(acl_file, tmp_path / "state", WriteErrors())
    asyncio.run(service.change(created=[acl("api")], deleted=[acl("b")]))
    assert service.authorizer.acls == (acl("a"), acl("api"))
    rewritten(acl_file, file_of("a", "b", "c"))
    service.reload_if_changed()
    assert set(service.authorizer.acls) == {acl("a"), acl("c"), acl("api")}, "b stays deleted"
    with caplog.at_level(logging.ERROR):
        rewritten(acl_file, file_of("a") + "[[acl]]\nprincipal = 3\n")
        service.reload_if_changed()
    assert set(service.authorizer.acls) == {acl("a"), acl("c"), acl("api")}
    assert "keeping the ACLs in force" in caplog.text and "[[acl]] entry 2" in caplog.text


def test_an_acl_deleted_stays_deleted_when_the_file_comes_to_have_it(tmp_path: Path) -> None:
    acl_file = tmp_path / "acls.toml"
    acl_file.write_text("")
    service = AclService(acl_file, tmp_path / "state", WriteErrors())
    asyncio.run(service.change(created=[acl("api")]))
    asyncio.run(service.change(deleted=[acl("api")]))
    assert read_changes(tmp_path / "state" / "acls.json") == {acl("api"): False}
    rewritten(acl_file, file_of("api"))
    service.reload_if_changed()
    assert service.authorizer.acls == ()


def test_in_a_fleet_a_change_is_published_and_in_force_once_read_back_then_copied(tmp_path: Path) -> None:
    service = AclService(None, tmp_path, WriteErrors())
    published: list[dict[AclBinding, bool]] = []

    async def publish(changes: dict[AclBinding, bool]) -> None:
        published.append(changes)
        assert service.authorizer.acls == (), "in force only once read back"
        service.replace_changes({**service.changes, **changes})

    async def run() -> None:
        service.share(publish)
        await service.change(created=[acl("a")], deleted=[acl("b")])
        await asyncio.sleep(0.1)  # the copy, on a worker thread

    asyncio.run(run())
    assert published == [{acl("a"): True, acl("b"): False}]
    assert service.authorizer.acls == (acl("a"),)
    assert read_changes(tmp_path / "acls.json") == {acl("a"): True, acl("b"): False}
