"""Space reclaim in the file store: old segments pinned by a few live messages are compacted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kanin.store.file_store import FileStore

QUEUE = "/\x00q"


async def settle(store: FileStore) -> None:
    for _ in range(20):  # compaction reads off the loop, then writes through the committer
        await store.committer.drain()
        await asyncio.sleep(0.01)


def test_a_few_live_messages_do_not_pin_old_segments(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FileStore(tmp_path, asyncio.get_running_loop(), segment_bytes=4096)
        store.recover()
        ids = [store.enqueue(QUEUE, "", "q", b"h", b"x" * 200) for _ in range(100)]
        await settle(store)
        segments_before = sorted(tmp_path.glob("*.log"))
        assert len(segments_before) > 3
        bytes_before = sum(path.stat().st_size for path in segments_before)
        keep = set(ids[::25])  # 4 survivors spread over the old segments
        for message_id in ids:
            if message_id not in keep:
                store.remove(QUEUE, message_id)
        await settle(store)
        assert store.compactions >= 1
        on_disk = sum(path.stat().st_size for path in tmp_path.glob("*.log"))
        assert on_disk < bytes_before / 2
        await store.close()

        reopened = FileStore(tmp_path, asyncio.get_running_loop(), segment_bytes=4096)
        recovered = reopened.recover()
        assert [m.id for m in recovered[QUEUE]] == sorted(keep)
        contents = reopened.read(QUEUE, [m.id for m in recovered[QUEUE]])
        assert all(c is not None and c.body == b"x" * 200 for c in contents)
        await reopened.close()

    asyncio.run(scenario())


def test_fully_removed_segments_are_deleted(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FileStore(tmp_path, asyncio.get_running_loop(), segment_bytes=4096)
        store.recover()
        ids = [store.enqueue(QUEUE, "", "q", b"h", b"y" * 300) for _ in range(60)]
        await settle(store)
        for message_id in ids:
            store.remove(QUEUE, message_id)
        store.enqueue(QUEUE, "", "q", b"h", b"z")  # rotate past the last full segment
        await settle(store)
        assert len(list(tmp_path.glob("*.log"))) <= 2
        await store.close()

    asyncio.run(scenario())
