"""The ACLs in force (``[authorizer]``): the ACL file's, overlaid by those created and deleted through CreateAcls and
DeleteAcls, as the quota file is by AlterClientQuotas.

An ACL created through the API is in force until it is deleted through the API; one deleted through the API stays
deleted, the file's too (its deletion is kept, so that ``kafka-acls --remove`` does what it says whatever the file
holds). The API's changes are kept in ``<state-dir>/acls.json``, so they outlive restarts: a change is saved (write,
fsync, rename, on a worker thread: a stalled disk must not stall every connection) before it is in force, and one
whose save fails changes nothing. The ACL file is read again when it changes; a bad one keeps the ACLs in force and
logs the file and entry.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from pathlib import Path

from allocator.durable import WriteErrors, write_durably
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
        self._changes_path = state_dir / ACLS_FILE
        self.changes: AclChanges = read_changes(self._changes_path)
        self._write_errors = write_errors
        self._saving = asyncio.Lock()
        """Changes are saved one after another, each over the one before."""
        self.authorizer = AclAuthorizer(self._in_force(self.changes), super_users, allow_everyone_if_no_acl_found)
        log.info("the authorizer judges requests by %d ACL(s)%s%s", len(self.authorizer.acls),
                 "" if self._acl_file is None else f" of {self._acl_file.path}",
                 f" and {len(self.changes)} change(s) through the ACL APIs" if self.changes else "")

    def _in_force(self, changes: AclChanges) -> list[AclBinding]:
        return [acl for acl in dict.fromkeys([*self._file_acls, *changes]) if changes.get(acl, True)]

    async def change(self, created: Iterable[AclBinding] = (), deleted: Iterable[AclBinding] = ()) -> None:
        """Save, then put in force, ACLs created and deleted through the API; raises OSError when the save failed,
        and then nothing changed."""
        async with self._saving:
            changes = dict(self.changes)
            file_acls = set(self._file_acls)
            for acl in deleted:
                if acl in file_acls:
                    changes[acl] = False
                else:
                    changes.pop(acl, None)
            changes.update(dict.fromkeys(created, True))
            try:
                await asyncio.get_running_loop().run_in_executor(None, save_changes, self._changes_path, changes)
            except OSError as error:
                self._write_errors.failed(STORE, error)
                raise
            self._write_errors.succeeded(STORE)
            self.changes = changes
            self.authorizer.replace(self._in_force(changes))

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


def save_changes(path: Path, changes: AclChanges) -> None:
    """Write what ``read_changes`` reads (durably: a crash leaves the file before or after, whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [{**acl_entry(acl), "in-force": in_force} for acl, in_force in changes.items()]
    write_durably(path, json.dumps({"acls": entries}, indent=1).encode())
