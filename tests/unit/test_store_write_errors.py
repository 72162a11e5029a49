"""A failed write is undone, so records written after it stay readable after a restart."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from kanin.store import segments
from kanin.store.store import FileStore

QUEUE = "/\x00q"


def test_failed_write_is_rolled_back_and_later_writes_survive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    fail = {"armed": False}

    def flaky_write(fd: int, data: bytes | memoryview) -> int:
        if fail["armed"]:
            fail["armed"] = False
            real_write(fd, bytes(data[: len(data) // 2]))  # half a batch reaches the file
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(segments.os, "write", flaky_write)

    async def scenario() -> None:
        store = FileStore(tmp_path, asyncio.get_running_loop())
        store.recover()
        outcomes: list[bool] = []
        store.enqueue(QUEUE, "", "q", b"h", b"before")
        store.after_commit(outcomes.append)
        await store.committer.drain()
        fail["armed"] = True
        store.enqueue(QUEUE, "", "q", b"h", b"lost-" + b"x" * 1000)
        store.after_commit(outcomes.append)
        await store.committer.drain()
        store.enqueue(QUEUE, "", "q", b"h", b"after")
        store.after_commit(outcomes.append)
        await store.committer.drain()
        assert outcomes == [True, False, True]  # the failed batch's publishers get a nack
        await store.close()

        reopened = FileStore(tmp_path, asyncio.get_running_loop())
        bodies = [m.body for m in reopened.recover()[QUEUE]]
        # The write after the failure is not hidden behind half a record.
        assert bodies == [b"before", b"after"]
        await reopened.close()

    asyncio.run(scenario())
