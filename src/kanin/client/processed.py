"""Where a receiver records the business ids it has processed.

The record of a biz-id must commit in the same transaction as the handler's own work:
then a crash anywhere leaves either both (the message, delivered again, is acked without
being processed again) or neither (it is processed again, from scratch). `ProcessedIds`
is that contract; `SqliteProcessedIds` keeps the record in an embedded SQLite file and
hands the handler the connection, in the open transaction, for its own tables. For
another database, implement the two methods on it: `recording` opens a transaction,
yields what the handler should write through, and on success inserts the biz-id and
commits.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any


class ProcessedIds(ABC):
    @abstractmethod
    async def seen(self, biz_id: str) -> bool:
        """Whether a message with this biz-id was processed (its transaction committed)."""

    @abstractmethod
    def recording(self, biz_id: str) -> AbstractAsyncContextManager[Any]:
        """A transaction for the handler's work (what it yields goes to the handler as
        Delivery.transaction); leaving it normally records the biz-id and commits both,
        leaving it by an exception rolls both back."""


class SqliteProcessedIds(ProcessedIds):
    """The record in a SQLite file (WAL journal). `synchronous` is SQLite's: FULL (the
    default) makes each commit durable against power loss, NORMAL against a crash of the
    process only, at far less cost per message."""

    TABLE = "kanin_processed"

    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"synchronous must be FULL, NORMAL or EXTRA, not {synchronous!r}")
        # Autocommit mode: transactions are begun and ended here, explicitly, one at a
        # time (the lock: a handler awaits inside its transaction). The commit runs on the
        # event loop: it waits for the disk there, but nothing can cut it in two.
        self.connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute(f"PRAGMA synchronous={synchronous.upper()}")
        self.connection.execute(
            f"CREATE TABLE IF NOT EXISTS {self.TABLE} (biz_id TEXT PRIMARY KEY, at REAL)"
        )
        self._lock = asyncio.Lock()

    async def seen(self, biz_id: str) -> bool:
        query = f"SELECT 1 FROM {self.TABLE} WHERE biz_id = ?"
        return self.connection.execute(query, (biz_id,)).fetchone() is not None

    def recording(self, biz_id: str) -> AbstractAsyncContextManager[sqlite3.Connection]:
        return self._recording(biz_id)

    @asynccontextmanager
    async def _recording(self, biz_id: str) -> AsyncIterator[sqlite3.Connection]:
        async with self._lock:
            connection = self.connection
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
                connection.execute(
                    f"INSERT INTO {self.TABLE} (biz_id, at) VALUES (?, ?)", (biz_id, time.time())
                )
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

    def close(self) -> None:
        self.connection.close()
