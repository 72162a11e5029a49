"""Space reclaim in the file store: old segments pinned by a few live messages are compacted,
and segments that consumers are emptying are left to empty."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from kanin.store import compaction
from kanin.store.file_store import FileStore
from kanin.store.segments import SegmentLog

QUEUE = "/\x00q"


async def settle(store: FileStore) -> None:
    for _ in range(20):  # compaction reads off the loop, then writes through the committer
        await store.committer.drain()
        await asyncio.sleep(0.01)


def test_a_few_live_messages_do_not_pin_old_segments(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FileStore(
            tmp_path, asyncio.get_running_loop(), segment_bytes=4096, compact_settle_s=0
        )
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
        store = FileStore(
            tmp_path, asyncio.get_running_loop(), segment_bytes=4096, compact_settle_s=0
        )
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


class HeldLog(SegmentLog):
    """Writes wait while `hold` is clear: a round stays running, so what is appended
    meanwhile (a compaction's copies) waits in the committer for the next round."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.hold = threading.Event()
        self.hold.set()

    def write(self, chunks: list[tuple[int, bytes]], *, sync: bool = True) -> list[int]:
        self.hold.wait(timeout=10)
        return super().write(chunks, sync=sync)


def test_a_message_removed_while_its_compaction_copy_waits_stays_removed(
    tmp_path: Path,
) -> None:
    """Its copy is not written yet, but its original is still on disk (in a segment that
    cannot be deleted while an older one lives): it needs its REMOVE record, unlike a
    message removed before its first ENQUEUE was written, which is withdrawn."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        log = HeldLog(tmp_path)
        store = FileStore(tmp_path, loop, segment_bytes=4096, segments=log, compact_settle_s=0)
        store.recover()
        ids = [store.enqueue(QUEUE, "", "q", b"h", b"x" * 200) for _ in range(60)]
        await settle(store)
        segment_of = {message_id: store._where[message_id] >> 32 for message_id in ids}
        oldest = min(segment_of.values())
        second = [m for m in ids if segment_of[m] == oldest + 1]
        assert len(second) > 8
        log.hold.clear()
        store.enqueue(QUEUE, "", "q", b"h", b"keeps a round running")
        await asyncio.sleep(0.05)
        moved, gone = second[0], second[1]
        for message_id in second[2:]:
            store.remove(QUEUE, message_id)  # the second oldest segment is compacted
        for _ in range(200):  # until its live messages are copied (the copies wait)
            if store._where[moved] & 0xFFFFFFFF == 0 and store._where[gone] & 0xFFFFFFFF == 0:
                break
            await asyncio.sleep(0.01)
        assert store._where[gone] & 0xFFFFFFFF == 0, "the compaction did not copy it"
        store.remove(QUEUE, gone)
        log.hold.set()
        await settle(store)
        await store.close()

        reopened = FileStore(tmp_path, loop, segment_bytes=4096)
        recovered = {m.id for m in reopened.recover()[QUEUE]}
        assert gone not in recovered
        assert moved in recovered
        await reopened.close()

    asyncio.run(scenario())


def test_draining_means_empty_within_the_horizon_at_the_last_pace() -> None:
    horizon = compaction.DRAIN_HORIZON_S
    assert compaction.draining(100, 40, settle_s=1.0)  # 60 gone a second: empty in under 1 s
    # 10 of 100 gone in a look: the 90 left take 9 looks, within the horizon or not.
    assert compaction.draining(100, 90, settle_s=horizon / 10)
    assert not compaction.draining(100, 90, settle_s=horizon / 8)
    assert not compaction.draining(10, 10, settle_s=1.0)  # nothing gone: it stopped
    assert not compaction.draining(10, 10, settle_s=0.0)
    assert compaction.draining(10, 9, settle_s=0.0)  # settle 0: any progress is draining


class CountingLog(SegmentLog):
    """Counts compaction reads (a segment read whole)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.whole_reads = 0

    def read_whole(self, number: int) -> tuple[bytes, int | None]:
        self.whole_reads += 1
        return super().read_whole(number)


def test_segments_being_emptied_in_order_are_deleted_without_a_compaction_read(
    tmp_path: Path,
) -> None:
    """A deep queue read back in order: each old segment falls below the live share while
    consumers are still taking its messages. It is left to empty and deleted whole, and
    no file is read whole to find live records that are about to go anyway."""

    async def scenario() -> None:
        store, log = watched_store(tmp_path, 0.1)
        ids = [store.enqueue(QUEUE, "", "q", b"h", b"x" * 200) for _ in range(100)]
        await settle(store)
        assert len(list(tmp_path.glob("*.log"))) > 5
        for message_id in ids:  # a consumer acking one message every 10 ms
            store.remove(QUEUE, message_id)
            await asyncio.sleep(0.01)
        store.enqueue(QUEUE, "", "q", b"h", b"z")  # rotate past the last full segment
        await settle(store)
        await asyncio.sleep(0.3)  # any look still due has happened
        assert log.whole_reads == 0
        assert store.compactions == 0
        assert len(list(tmp_path.glob("*.log"))) <= 2
        await store.close()

    asyncio.run(scenario())


async def leave_one_in_the_first_segment(store: FileStore) -> list[int]:
    """Fill a few segments, then remove all but one message of the first (below the live
    share: a look is due); that segment's ids, the one left first."""
    ids = [store.enqueue(QUEUE, "", "q", b"h", b"x" * 200) for _ in range(40)]
    await settle(store)
    first = [m for m in ids if store._where[m] >> 32 == store._where[ids[0]] >> 32]
    for message_id in first[1:]:  # then nothing more is taken
        store.remove(QUEUE, message_id)
    return first


def watched_store(directory: Path, settle_s: float) -> tuple[FileStore, CountingLog]:
    log = CountingLog(directory)
    loop = asyncio.get_running_loop()
    store = FileStore(directory, loop, segment_bytes=4096, segments=log, compact_settle_s=settle_s)
    store.recover()
    return store, log


def test_a_segment_that_stops_draining_is_compacted_at_the_next_look(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, log = watched_store(tmp_path, 0.1)
        first_segment = await leave_one_in_the_first_segment(store)
        await asyncio.sleep(0.05)
        assert log.whole_reads == 0, "compacted before the first look"
        for _ in range(100):
            await settle(store)
            if store.compactions:
                break
        assert log.whole_reads == 1
        assert store.compactions == 1
        await store.close()

        reopened = FileStore(tmp_path, asyncio.get_running_loop(), segment_bytes=4096)
        assert first_segment[0] in {m.id for m in reopened.recover()[QUEUE]}
        await reopened.close()

    asyncio.run(scenario())


def test_a_look_still_due_when_the_store_closes_starts_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        store, log = watched_store(tmp_path, 0.05)
        await leave_one_in_the_first_segment(store)
        assert any(state.compacting for state in store._live.values())
        await store.close()
        await asyncio.sleep(0.2)  # past the look: it was cancelled with the store
        assert log.whole_reads == 0

    asyncio.run(scenario())
