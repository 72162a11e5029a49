"""A failed write is undone, so records written after it stay readable after a restart."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from kanin.store import segments
from kanin.store.file_store import FileStore

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
        ids = [store.enqueue(QUEUE, "", "q", b"h", b"before")]
        store.after_commit(outcomes.append)
        await store.committer.drain()
        fail["armed"] = True
        lost = b"lost-" + b"x" * 1000
        ids.append(store.enqueue(QUEUE, "", "q", b"h", lost))
        store.after_commit(outcomes.append)
        await store.committer.drain()
        ids.append(store.enqueue(QUEUE, "", "q", b"h", b"after"))
        store.after_commit(outcomes.append)
        await store.committer.drain()
        assert outcomes == [True, False, True]  # the failed batch's publishers get a nack
        # The running broker still holds all three: the undone one from memory, and the one
        # written after the undo from where it really landed (not where it would have been).
        read = store.read(QUEUE, ids)
        assert [c.body if c else None for c in read] == [b"before", lost, b"after"]
        await store.close()

        reopened = FileStore(tmp_path, asyncio.get_running_loop())
        recovered = reopened.recover()[QUEUE]
        bodies = [c.body if c else None for c in reopened.read(QUEUE, [m.id for m in recovered])]
        # The write after the failure is not hidden behind half a record.
        assert bodies == [b"before", b"after"]
        await reopened.close()

    asyncio.run(scenario())
