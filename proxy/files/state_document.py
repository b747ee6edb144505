"""One document of the state directory that the proxy replaces whole: the client-quota overrides, the ACL changes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from allocator.durable import WriteErrors, write_durably

Document = TypeVar("Document")


class StateDocument(Generic[Document]):
    def __init__(self, path: Path, store: str, write_errors: WriteErrors, encode: Callable[[Document], bytes],
                 saving: asyncio.Lock) -> None:
        """``store``: its name in ``kafka_quota_proxy_state_write_errors_total``; ``saving``: what its owner holds
        while it changes the document, so that one write follows another, each over the one before."""
        self.path = path
        self._store = store
        self._write_errors = write_errors
        self._encode = encode
        self._saving = saving
        self._copying: set[asyncio.Task[None]] = set()
        """Copies being written (kept: a task unreferenced may go)."""

    async def save(self, document: Document) -> None:
        """Write ``document`` (write, fsync, rename, on a worker thread: a stalled disk must not stall every
        connection), the outcome counted; raises OSError. The caller holds ``saving``."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._write, document)
        except OSError as error:
            self._write_errors.failed(self._store, error)
            raise
        self._write_errors.succeeded(self._store)

    def _write(self, document: Document) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_durably(self.path, self._encode(document))

    def copy(self, document: Document, current: Callable[[], Document]) -> None:
        """Write ``document`` in the background, unless ``current()`` is another by then (a later copy follows); a
        failure is counted and logged, and nothing else (a fleet's topic still has it)."""
        async def copied() -> None:
            async with self._saving:
                if document is current():
                    with contextlib.suppress(OSError):
                        await self.save(document)

        self._copying.add(task := asyncio.get_running_loop().create_task(copied()))
        task.add_done_callback(self._copying.discard)
