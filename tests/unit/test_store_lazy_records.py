"""Records nobody waits for (delivered marks, removals) start no commit round of their own
(kanin/store/committer.py): they ride along with the next round something else starts, and
if none starts within LAZY_WRITE_S they are written without an fsync. Runs on a real
directory with a SegmentLog that records what each write was asked to do."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kanin.store import records
from kanin.store.committer import LAZY_WRITE_S
from kanin.store.file_store import FileStore
from kanin.store.records import FILE_HEADER
from kanin.store.segments import SegmentLog

QUEUE = "/\x00q"


class RecordingLog(SegmentLog):
    """Each write as (record types in it, whether it was fsynced)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.writes: list[tuple[list[int], bool]] = []

    def write(self, chunks: list[tuple[int, bytes]], *, sync: bool = True) -> list[int]:
        data = FILE_HEADER + b"".join(data for _, data in chunks)
        self.writes.append(([record.type for _, record in records.scan(data)], sync))
        return super().write(chunks, sync=sync)


async def committed(store: FileStore) -> bool:
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    store.after_commit(done.set_result)
    return await done


async def open_store(directory: Path) -> tuple[FileStore, RecordingLog]:
    log = RecordingLog(directory)
    store = FileStore(directory, asyncio.get_running_loop(), segments=log)
    store.recover()
    return store, log


async def test_removals_and_delivered_marks_start_no_round(tmp_path: Path) -> None:
    store, log = await open_store(tmp_path)
    ids = [store.enqueue(QUEUE, "", "rk", b"", b"body") for _ in range(3)]
    assert await committed(store)
    rounds, writes = store.committer.rounds_started, len(log.writes)
    store.delivered(QUEUE, ids[0])
    store.remove(QUEUE, ids[1])
    await asyncio.sleep(LAZY_WRITE_S / 4)
    assert store.committer.rounds_started == rounds  # nothing started a round for them
    assert len(log.writes) == writes
    await store.close()


async def test_lazy_records_ride_along_with_the_next_round(tmp_path: Path) -> None:
    store, log = await open_store(tmp_path)
    first = store.enqueue(QUEUE, "", "rk", b"", b"one")
    assert await committed(store)
    store.remove(QUEUE, first)
    store.enqueue(QUEUE, "", "rk", b"", b"two")
    assert await committed(store)
    assert log.writes[-1] == ([records.REMOVE, records.ENQUEUE], True)
    await store.close()


async def test_alone_they_are_written_without_fsync_soon(tmp_path: Path) -> None:
    store, log = await open_store(tmp_path)
    message = store.enqueue(QUEUE, "", "rk", b"", b"one")
    assert await committed(store)
    writes = len(log.writes)
    store.delivered(QUEUE, message)
    store.remove(QUEUE, message)
    for _ in range(200):
        if len(log.writes) > writes:
            break
        await asyncio.sleep(LAZY_WRITE_S)
    assert log.writes[writes:] == [([records.DELIVERED, records.REMOVE], False)]
    await store.close()


async def test_what_was_written_lazily_is_read_by_recovery(tmp_path: Path) -> None:
    """A process crash keeps what write() handed the kernel: abandon the store (no drain,
    no close), open the directory again: the removed message stays removed."""
    store, _ = await open_store(tmp_path)
    kept, gone = (store.enqueue(QUEUE, "", "rk", b"", b"x") for _ in range(2))
    assert await committed(store)
    store.remove(QUEUE, gone)
    for _ in range(200):
        if store.committer.idle:
            break
        await asyncio.sleep(LAZY_WRITE_S)
    assert store.committer.idle
    again = FileStore(tmp_path, asyncio.get_running_loop())
    assert [message.id for message in again.recover()[QUEUE]] == [kept]
    await again.close()
    await store.close()


# A message removed before any round has taken its ENQUEUE (acked that soon) is withdrawn:
# neither the ENQUEUE nor a REMOVE is written, as RabbitMQ's message store skips a
# message acked before it was written.


async def test_a_message_removed_before_its_round_is_never_written(tmp_path: Path) -> None:
    store, log = await open_store(tmp_path)
    gone = store.enqueue(QUEUE, "", "rk", b"", b"acked at once")
    kept = store.enqueue(QUEUE, "", "rk", b"", b"kept")
    store.remove(QUEUE, gone)  # same loop turn: no round has started yet
    assert await committed(store)
    assert [types for types, _ in log.writes] == [[records.ENQUEUE]]
    assert (store.committer.withdrawn, store.committer.records_committed) == (1, 1)
    await store.close()
    again = FileStore(tmp_path, asyncio.get_running_loop())
    assert [message.id for message in again.recover()[QUEUE]] == [kept]
    await again.close()


async def test_a_message_removed_while_its_round_runs_gets_a_remove(tmp_path: Path) -> None:
    store, log = await open_store(tmp_path)
    message = store.enqueue(QUEUE, "", "rk", b"", b"body")
    round_done = asyncio.ensure_future(committed(store))
    await asyncio.sleep(0)  # the round starts: it has taken the ENQUEUE
    assert store.committer.rounds_started == 1
    store.remove(QUEUE, message)
    assert await round_done
    assert await committed(store)
    assert [types for types, _ in log.writes] == [[records.ENQUEUE], [records.REMOVE]]
    await store.close()
    again = FileStore(tmp_path, asyncio.get_running_loop())
    assert again.recover() == {}
    await again.close()


async def test_a_withdrawn_message_with_a_delivered_mark_stays_gone(tmp_path: Path) -> None:
    """Its delivered mark is still written (it was placed before the removal); recovery
    ignores a mark for a message it never saw, and a new message after the restart is
    not taken for it."""
    store, log = await open_store(tmp_path)
    gone = store.enqueue(QUEUE, "", "rk", b"", b"body")
    store.delivered(QUEUE, gone)
    store.remove(QUEUE, gone)
    assert await committed(store)
    assert [types for types, _ in log.writes] == [[records.DELIVERED]]
    await store.close()
    again = FileStore(tmp_path, asyncio.get_running_loop())
    assert again.recover() == {}
    fresh = again.enqueue(QUEUE, "", "rk", b"", b"new")
    assert await committed(again)
    await again.close()
    third = FileStore(tmp_path, asyncio.get_running_loop())
    recovered = third.recover()[QUEUE]
    assert fresh != gone
    assert [(m.id, m.redelivered) for m in recovered] == [(fresh, False)]
    await third.close()
