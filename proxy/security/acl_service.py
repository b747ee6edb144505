"""The ACLs in force (``[authorizer]``): the ACL file's, overlaid by those created and deleted through CreateAcls and
DeleteAcls, as the quota file is by AlterClientQuotas.

An ACL created through the API is in force until it is deleted through the API; one deleted through the API stays
deleted, even if the file has it or comes to have it (its deletion is kept, so that ``kafka-acls --remove`` does what
it says whatever the file holds). A proxy alone keeps the API's changes in ``<state-dir>/acls.json``, so they outlive
restarts: a change is saved (write, fsync, rename, on a worker thread: a stalled disk must not stall every
connection) before it is in force, and one whose save fails changes nothing. A fleet keeps them in a topic of the
cluster (``share``; ``proxy.cluster.shared_settings``): a change is published there and in force as each member
reads it back, and the file is a copy of what was read, in force at a start until the topic is read. The ACL file is
read again when it changes; a bad one keeps the ACLs in force and logs the file and entry.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from allocator.durable import WriteErrors
from proxy.files.state_document import StateDocument
from proxy.files.watched_file import WatchedFile
from proxy.security.acl_file import AclFileError, acl_entry, acls_of_entry, read_acl_file
from proxy.security.acls import AclAuthorizer, AclBinding

log = logging.getLogger(__name__)

RELOAD_INTERVAL_S = 1.0
ACLS_FILE = "acls.json"
STORE = "acls"
"""The API's changes' name in ``kafka_quota_proxy_state_write_errors_total``."""

AclChanges = dict[AclBinding, bool]
"""The ACLs created through the API (True) and the file's deleted through it (False)."""


class AclService:
    def __init__(self, acl_file: Path | None, state_dir: Path, write_errors: WriteErrors,
                 super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        """Raises ``AclFileError`` when the ACL file or the saved changes cannot be read: the proxy does not start
        with ACLs other than those it was given."""
        self._acl_file = None if acl_file is None else WatchedFile(acl_file)
        self._file_acls = [] if self._acl_file is None else read_acl_file(self._acl_file.path)
        self.changes: AclChanges = read_changes(state_dir / ACLS_FILE)
        self._saving = asyncio.Lock()
        """Held while the changes change: one after another, each over the one before."""
        self._saved = StateDocument(state_dir / ACLS_FILE, STORE, write_errors, changes_document, self._saving)
        self._publish: Callable[[AclChanges], Awaitable[None]] | None = None
        """In a fleet: hands a change to the fleet's ACL topic, returning once it is there (and read back)."""
        self.authorizer = AclAuthorizer(self._in_force(self.changes), super_users, allow_everyone_if_no_acl_found)
        log.info("the authorizer judges requests by %d ACL(s)%s%s", len(self.authorizer.acls),
                 "" if self._acl_file is None else f" of {self._acl_file.path}",
                 f" and {len(self.changes)} change(s) through the ACL APIs" if self.changes else "")

    def _in_force(self, changes: AclChanges) -> list[AclBinding]:
        return [acl for acl in dict.fromkeys([*self._file_acls, *changes]) if changes.get(acl, True)]

    async def change(self, created: Iterable[AclBinding] = (), deleted: Iterable[AclBinding] = ()) -> None:
        """Save (or, in a fleet, publish), then put in force, ACLs created and deleted through the API; raises OSError
        when the save or the publication failed, and then nothing changed."""
        delta: AclChanges = {**dict.fromkeys(deleted, False), **dict.fromkeys(created, True)}
        async with self._saving:
            if self._publish is not None:
                await self._publish(delta)  # in force once read back from the topic (replace_changes)
                return
            changes = {**self.changes, **delta}
            await self._saved.save(changes)
            self.changes = changes
            self.authorizer.replace(self._in_force(changes))

    def share(self, publish: Callable[[AclChanges], Awaitable[None]]) -> None:
        """Keep the API's changes in the fleet's topic: ``change`` hands them to ``publish``, and
        ``replace_changes`` puts in force what is read from the topic."""
        self._publish = publish

    def replace_changes(self, changes: AclChanges) -> None:
        """Put in force the changes read from the fleet's topic, and copy them to the state directory in the
        background."""
        self.changes = changes
        self.authorizer.replace(self._in_force(changes))
        self._saved.copy(changes, lambda: self.changes)

    def reload_if_changed(self) -> None:
        if self._acl_file is None or not self._acl_file.changed():
            return
        try:
            self._file_acls = read_acl_file(self._acl_file.path)
        except AclFileError as error:
            log.error("keeping the ACLs in force: %s", error)
            return
        self.authorizer.replace(self._in_force(self.changes))
        log.info("reloaded %d ACL(s) from %s: %d in force", len(self._file_acls), self._acl_file.path,
                 len(self.authorizer.acls))

    async def maintain(self) -> None:
        """A changed ACL file applies to the next request."""
        while True:
            await asyncio.sleep(RELOAD_INTERVAL_S)
            self.reload_if_changed()


def read_changes(path: Path) -> AclChanges:
    """The changes saved in ``path`` (none when it does not exist); raises ``AclFileError`` naming the entry."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise AclFileError(f"{path}: unreadable ACL changes: {error}") from None
    changes: AclChanges = {}
    entries = document.get("acls") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise AclFileError(f"{path}: unreadable ACL changes: no list of acls")
    for number, entry in enumerate(entries, start=1):
        try:
            in_force = entry.get("in-force") if isinstance(entry, dict) else None
            if not isinstance(in_force, bool):
                raise ValueError("an ACL with in-force true or false")
            fields = {key: value for key, value in entry.items() if key != "in-force"}
            changes.update(dict.fromkeys(acls_of_entry(fields), in_force))
        except ValueError as problem:
            raise AclFileError(f"{path}: ACL change {number}: {problem}") from None
    return changes


def changes_document(changes: AclChanges) -> bytes:
    """What ``read_changes`` reads."""
    entries = [{**acl_entry(acl), "in-force": in_force} for acl, in_force in changes.items()]
    return json.dumps({"acls": entries}, indent=1).encode()
