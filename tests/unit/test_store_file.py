"""The FileStore's own duties (kanin/store/file_store.py, segments.py, committer.py), beyond the
contract it shares with MemoryStore (test_store_contract.py): segment rotation, reclaiming the
space of removed messages, what a crash leaves behind, group commit, and disk faults.

Faults come from kanin.testing.faulty_disk; "restart" is close + a new FileStore on the same
directory + recover(), "crash" is abandoning the store without a drain.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kanin.store import record_reads, records, segments
from kanin.store.api import Content
from kanin.store.file_store import FileStore
from kanin.store.records import FILE_HEADER
from kanin.store.segments import SegmentLog
from kanin.testing.faulty_disk import (
    FaultySegmentLog,
    append_garbage,
    corrupt_byte,
    newest_segment,
    segment_files,
    truncate_tail,
)
from store_harness import (
    Q1,
    Q2,
    SEGMENT_BYTES,
    Harness,
    Sent,
    body,
    expected,
    segment_of,
)


@pytest.fixture
async def faulty(tmp_path: Path) -> AsyncIterator[Harness]:
    opened = Harness.open("file", tmp_path / "store", faulty=True)
    try:
        yield opened
    finally:
        if opened.log is not None and opened.log.crashed:
            opened.crash()
        else:
            await opened.close()


async def settle(harness: Harness) -> None:
    """Let background work (compaction reads, their rewrites) finish and commit."""
    for _ in range(50):
        await harness.commit()
        await asyncio.sleep(0.005)
        if harness.file.committer.idle and not any(
            state.compacting for state in harness.file._live.values()
        ):
            return
    raise AssertionError("the store never settled")


# -- segments --------------------------------------------------------------------------------


async def test_segments_rotate_at_the_size_limit(files: Harness) -> None:
    sent = [files.enqueue(Q1, body(i, 500)) for i in range(40)]
    assert await files.commit() is True
    paths = segment_files(files.directory)
    assert len(paths) >= 5, paths
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(FILE_HEADER)
        # A record overshoots the limit only when it is alone in its segment.
        assert len(data) <= SEGMENT_BYTES + len(FILE_HEADER), (path, len(data))
    where = segment_of(files.directory)
    numbers = [where[m.id] for m in sent]
    assert numbers == sorted(numbers)  # filled in id order
    assert await files.restart() == expected(sent)


async def test_a_message_larger_than_a_segment_gets_one_alone(files: Harness) -> None:
    big = files.enqueue(Q1, os.urandom(3 * SEGMENT_BYTES))
    small = files.enqueue(Q1, b"small")
    assert await files.commit() is True
    where = segment_of(files.directory)
    assert where[big.id] != where[small.id]
    assert await files.restart() == expected([big, small])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
async def test_every_segment_a_round_writes_is_fsynced_before_its_waiters_run(
    files: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that spans a rotation writes two files; both must be fsynced, not the new one
    twice (the old file's descriptor must not be closed before its fsync)."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    for i in range(12):  # about 1.5 segments in one batch
        files.enqueue(Q1, body(i, 500))
    assert await files.commit() is True
    written = [path.name for path in segment_files(files.directory)]
    assert len(written) == 2
    assert set(written) <= set(synced), (written, synced)


async def test_a_segment_whose_messages_are_all_removed_is_deleted(files: Harness) -> None:
    sent = [files.enqueue(Q1, body(i, 500)) for i in range(40)]
    assert await files.commit() is True
    where = segment_of(files.directory)
    first = where[sent[0].id]
    in_first = [m for m in sent if where[m.id] == first]
    assert 1 < len(in_first) < len(sent)
    path = files.directory / f"{first:012d}.log"
    # Removing half keeps the file (too full to be worth compacting) ...
    for message in in_first[: len(in_first) // 2]:
        files.store.remove(Q1, message.id)
    assert await files.commit() is True
    assert path.exists()
    # ... and removing the rest deletes it in the next commit round.
    for message in in_first[len(in_first) // 2 :]:
        files.store.remove(Q1, message.id)
    assert path.exists()  # not before the REMOVE records are durable
    assert await files.commit() is True
    assert not path.exists()
    survivors = [m for m in sent if where[m.id] != first]
    assert await files.restart() == expected(survivors)


async def test_space_of_removed_messages_is_reclaimed(files: Harness) -> None:
    def disk_bytes() -> int:
        return sum(p.stat().st_size for p in segment_files(files.directory))

    live: list[Sent] = []
    for round_ in range(10):
        batch = [files.enqueue(Q1, body(i, 700)) for i in range(20)]
        assert await files.commit() is True
        for message in live:
            files.store.remove(Q1, message.id)
        live = batch
        await settle(files)
        # Ten rounds write ~140 KB; about two batches' worth may be on disk at any time.
        assert disk_bytes() < 3 * 20 * 700, (round_, disk_bytes())
    assert await files.restart() == expected(live)
    assert disk_bytes() < 3 * 20 * 700


async def test_restart_deletes_segments_with_nothing_live(files: Harness) -> None:
    sent = [files.enqueue(Q1, body(i, 500)) for i in range(30)]
    for message in sent[:-1]:
        files.store.remove(Q1, message.id)
    assert await files.commit() is True
    assert await files.restart() == expected(sent[-1:])
    assert len(segment_files(files.directory)) <= 2


async def test_tombstones_survive_the_deletion_of_the_segment_holding_them(
    files: Harness,
) -> None:
    """A REMOVE lives in a later segment than its ENQUEUE. When that later segment is deleted
    for having no live messages of its own, the REMOVE must not go with it while the
    ENQUEUE's segment still exists, or the removed message comes back."""
    a = files.enqueue(Q1, body(1, 1500))  # segment 1: a, b
    b = files.enqueue(Q1, body(2, 1500))
    assert await files.commit() is True  # a on disk: its removal is a REMOVE record
    c = files.enqueue(Q1, body(3, 3000))  # segment 2: c, then REMOVE a
    files.store.remove(Q1, a.id)
    d = files.enqueue(Q1, body(4, 3000))  # segment 3: d
    assert await files.commit() is True
    where = segment_of(files.directory)
    assert where[a.id] == where[b.id] < where[c.id] < where[d.id]
    files.store.remove(Q1, c.id)  # segment 2 now has nothing live
    await settle(files)
    assert await files.restart() == expected([b, d])
    assert await files.restart() == expected([b, d])


async def test_a_segment_holding_only_tombstones_is_kept_at_recovery(files: Harness) -> None:
    """The same at start-up: a segment with only a REMOVE for a message in an older, still
    live segment is not garbage."""
    a = files.enqueue(Q1, body(1, 1500))
    b = files.enqueue(Q1, body(2, 1500))
    assert await files.commit() is True
    await files.restart()  # new appends go to a fresh segment
    files.store.remove(Q1, a.id)  # the only record in the new segment
    assert await files.commit() is True
    assert await files.restart() == expected([b])
    assert await files.restart() == expected([b])


# -- compaction --------------------------------------------------------------------------------


async def sparse_old_segment(files: Harness) -> tuple[list[Sent], Sent]:
    """Segment 1 holds ~8 messages; all but one are removed, which compacts it."""
    sent = [files.enqueue(Q1, body(i, 450)) for i in range(24)]
    assert await files.commit() is True
    where = segment_of(files.directory)
    in_first = [m for m in sent if where[m.id] == 1]
    assert len(in_first) >= 5
    keep = in_first[len(in_first) // 2]
    return sent, keep


async def test_compaction_moves_the_last_live_messages_and_frees_the_file(
    files: Harness,
) -> None:
    sent, keep = await sparse_old_segment(files)
    where = segment_of(files.directory)
    gone = [m for m in sent if where[m.id] == 1 and m is not keep]
    for message in gone:
        files.store.remove(Q1, message.id)
    await settle(files)
    assert files.file.compactions >= 1
    assert not (files.directory / f"{1:012d}.log").exists()
    assert segment_of(files.directory)[keep.id] > 1
    survivors = [m for m in sent if m not in gone]
    assert await files.restart() == expected(survivors)  # same ids, same order
    assert await files.restart() == expected(survivors)


async def test_compaction_keeps_the_redelivered_flag(files: Harness) -> None:
    sent, keep = await sparse_old_segment(files)
    files.store.delivered(Q1, keep.id)
    assert await files.commit() is True
    where = segment_of(files.directory)
    gone = [m for m in sent if where[m.id] == 1 and m is not keep]
    for message in gone:
        files.store.remove(Q1, message.id)
    await settle(files)
    assert files.file.compactions >= 1
    survivors = [m for m in sent if m not in gone]
    assert await files.restart() == expected(survivors, redelivered={keep.id})


async def test_compaction_keeps_the_returns_count_of_the_delivery_mark(files: Harness) -> None:
    sent, keep = await sparse_old_segment(files)
    files.store.delivered(Q1, keep.id, 6)
    assert await files.commit() is True
    where = segment_of(files.directory)
    for message in sent:
        if where[message.id] == 1 and message is not keep:
            files.store.remove(Q1, message.id)
    await settle(files)
    assert files.file.compactions >= 1
    recovered = {m.id: m for m in (await files.restart_recovered())[Q1]}
    assert recovered[keep.id].returns == 7
    assert recovered[keep.id].redelivered


class GatedLog(FaultySegmentLog):
    """Compaction reads wait for the test to open the gate."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.gate = threading.Event()

    def read_whole(self, number: int) -> tuple[bytes, int | None]:
        assert self.gate.wait(10), "the test never opened the gate"
        return super().read_whole(number)


async def test_a_failed_compaction_write_does_not_lose_the_moved_message(
    tmp_path: Path,
) -> None:
    """Compaction copies a message forward and later deletes the old file. If the copy's
    round fails, the old file is the only copy: it must not be deleted."""
    loop = asyncio.get_running_loop()
    log = GatedLog(tmp_path)
    store = FileStore(tmp_path, loop, segment_bytes=SEGMENT_BYTES, segments=log, compact_settle_s=0)
    store.recover()
    files = Harness("file", tmp_path, loop, store, SEGMENT_BYTES, log)
    pinned = [files.enqueue(Q1, body(i, 1900)) for i in range(2)]  # segment 1, stays half full
    sparse = [files.enqueue(Q1, body(i, 441)) for i in range(8)]  # segment 2, exactly full
    tail = [files.enqueue(Q1, body(i, 441)) for i in range(10)]  # segments 3 and on
    assert await files.commit() is True
    where = segment_of(tmp_path)
    assert {where[m.id] for m in pinned} == {1} and {where[m.id] for m in sparse} == {2}
    files.store.remove(Q1, pinned[0].id)  # segment 1: half live, not compacted
    moved = sparse[-1]
    for message in sparse[:-1]:
        files.store.remove(Q1, message.id)  # segment 2: 1 of 8 live, compacted
    assert await files.commit() is True
    log.fail_next_write(errno.ENOSPC)  # the round carrying the copy fails
    log.gate.set()
    for _ in range(200):
        if log.failures:
            break
        await asyncio.sleep(0.01)
    assert store.compactions == 0  # the copy's round failed: the compaction did not complete
    assert log.failures == 1
    files.store.remove(Q1, pinned[1].id)  # segment 1 dies; 2 may go only if `moved` is safe
    await settle(files)
    survivors = [moved, *tail]
    recovered = await files.restart()
    ids = [m.id for m in recovered.get(Q1, [])]
    assert moved.id in ids, f"the compacted message {moved.id} was lost: {ids}"
    assert recovered == expected(survivors)


# -- what a crash leaves behind ------------------------------------------------------------------


async def fill_and_close(files: Harness, count: int, size: int = 300) -> list[Sent]:
    sent = [files.enqueue(Q1, body(i, size)) for i in range(count)]
    assert await files.commit() is True
    await files.close()
    return sent


@pytest.mark.parametrize("cut", [1, 5, 8, 9, 100, 299])
async def test_a_torn_tail_is_cut_and_the_valid_prefix_survives(files: Harness, cut: int) -> None:
    sent = await fill_and_close(files, 8)
    path = newest_segment(files.directory)
    valid = path.stat().st_size
    truncate_tail(files.directory, cut)  # tears the last record (each is > 300 bytes)
    assert files.reopen() == expected(sent[:-1])
    assert path.stat().st_size == valid - sent[-1].encoded_size()
    # New appends go to a fresh segment, never after the cut.
    later = files.enqueue(Q1, b"after recovery")
    assert await files.commit() is True
    assert segment_of(files.directory)[later.id] > int(path.stem)
    assert await files.restart() == expected([*sent[:-1], later])


@pytest.mark.parametrize("garbage_bytes", [1, 7, 8, 64, 5000])
async def test_random_bytes_after_the_last_record_are_cut(
    files: Harness, garbage_bytes: int
) -> None:
    sent = await fill_and_close(files, 8)
    path = newest_segment(files.directory)
    valid = path.stat().st_size
    append_garbage(files.directory, random.Random(garbage_bytes).randbytes(garbage_bytes))
    assert files.reopen() == expected(sent)
    assert path.stat().st_size == valid
    later = files.enqueue(Q2, b"after recovery")
    assert await files.commit() is True
    assert await files.restart() == expected([*sent, later])


async def test_zeros_after_the_last_record_are_cut(files: Harness) -> None:
    sent = await fill_and_close(files, 4)
    append_garbage(files.directory, bytes(4096))
    assert files.reopen() == expected(sent)


async def test_a_flipped_checksum_in_the_newest_segment_loses_only_that_record(
    files: Harness,
) -> None:
    """Valid records follow it: corruption, not a torn tail; nothing after it is cut."""
    sent = await fill_and_close(files, 40, size=400)
    path = newest_segment(files.directory)
    where = segment_of(files.directory)
    in_last = [m for m in sent if where[m.id] == int(path.stem)]
    assert len(in_last) >= 4
    offsets = [offset for offset, _ in records.scan(path.read_bytes())]
    hit = len(offsets) // 2
    size = path.stat().st_size
    corrupt_byte(path, offsets[hit] + 4)  # the checksum field
    assert files.reopen() == expected([m for m in sent if m.id != in_last[hit].id])
    assert path.stat().st_size == size


async def test_a_corrupt_record_in_an_older_segment_does_not_hide_later_segments(
    files: Harness,
) -> None:
    sent = await fill_and_close(files, 40, size=400)
    first = segment_files(files.directory)[0]
    where = segment_of(files.directory)
    offsets = [offset for offset, _ in records.scan(first.read_bytes())]
    corrupt_byte(first, offsets[-1] + 20)  # a payload byte of its last record
    lost = max(m.id for m in sent if where[m.id] == int(first.stem))
    assert files.reopen() == expected([m for m in sent if m.id != lost])


async def test_a_segment_with_a_bad_header_still_gives_its_records(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The records are checksummed: a damaged magic or version loses none of them. The file
    is left as it is and read back (deep queues) in the version recovery found."""
    sent = await fill_and_close(files, 20, size=400)
    first = segment_files(files.directory)[0]
    original = first.read_bytes()
    corrupt_byte(first, 0)
    corrupt_byte(first, 7)
    assert files.reopen() == expected(sent)
    assert f"segment {first.name}: damaged file header" in caplog.text
    assert first.read_bytes()[8:] == original[8:]
    later = files.enqueue(Q1, b"later")
    assert await files.commit() is True
    assert await files.restart() == expected([*sent, later])


@pytest.mark.parametrize("leftover", [b"", FILE_HEADER, FILE_HEADER[:3]])
async def test_an_empty_or_headerless_newest_segment_from_a_crash(
    files: Harness, leftover: bytes
) -> None:
    sent = await fill_and_close(files, 5)
    number = int(newest_segment(files.directory).stem) + 1
    (files.directory / f"{number:012d}.log").write_bytes(leftover)
    assert files.reopen() == expected(sent)
    later = files.enqueue(Q1, b"later")
    assert await files.commit() is True
    assert await files.restart() == expected([*sent, later])


@pytest.mark.parametrize("leftover", [FILE_HEADER, b""], ids=["header-only", "empty"])
async def test_a_record_less_newest_segment_is_not_reclaimed_under_new_messages(
    files: Harness, leftover: bytes
) -> None:
    """A crash can leave the newest segment with a header and no whole record. Recovery
    picks the next segment number from the records it read, i.e. that same file's number:
    the file must then count as the active segment, never as a dead one to delete later."""
    first = await fill_and_close(files, 1)
    (files.directory / f"{2:012d}.log").write_bytes(leftover)
    assert files.reopen() == expected(first)
    later = [files.enqueue(Q1, body(i, 500)) for i in range(12)]  # segment 2, then 3 and 4
    assert await files.commit() is True
    files.store.remove(Q1, first[0].id)  # segment 1 dies; reclaim runs from the oldest
    await settle(files)
    recovered = await files.restart()
    assert [m.id for m in recovered.get(Q1, [])] == [m.id for m in later]
    assert recovered == expected(later)


# -- group commit ------------------------------------------------------------------------------


async def test_many_appends_in_one_turn_are_one_commit_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = Harness.open("file", tmp_path, segment_bytes=1 << 20)
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    rounds = files.file.committer.rounds
    sent = [files.enqueue(Q1 if i % 2 else Q2, body(i, 20)) for i in range(500)]
    for message in sent[::5]:
        files.store.delivered(message.queue, message.id)
    assert await files.commit() is True
    assert files.file.committer.rounds == rounds + 1
    # One file fsync, plus for the new segment file the directory's and the manifest's (its
    # file and the directory again, once per segment): never one per message.
    assert 1 <= len(fsyncs) <= 4, len(fsyncs)
    # The next batch goes to the same, already open file: exactly one fsync.
    fsyncs.clear()
    more = [files.enqueue(Q1, body(i, 20)) for i in range(100)]
    assert await files.commit() is True
    assert files.file.committer.rounds == rounds + 2
    assert len(fsyncs) == 1
    monkeypatch.undo()
    assert await files.restart() == expected([*sent, *more], {m.id for m in sent[::5]})
    await files.close()


class BlockingLog(SegmentLog):
    """A SegmentLog whose write waits until the test releases it, recording each batch."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.batches: list[list[int]] = []  # ids of the ENQUEUE records in each write

    def write(self, chunks: list[tuple[int, bytes]], *, sync: bool = True) -> list[int]:
        self.entered.set()
        assert self.release.wait(10), "the test never released the write"
        data = FILE_HEADER + b"".join(data for _, data in chunks)
        self.batches.append([r.id for _, r in records.scan(data) if r.type == records.ENQUEUE])
        return super().write(chunks, sync=sync)


async def wait_for(condition: threading.Event) -> None:
    for _ in range(1000):
        if condition.is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_appends_during_a_round_wait_for_the_next_round(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    log = BlockingLog(tmp_path)
    store = FileStore(tmp_path, loop, segment_bytes=SEGMENT_BYTES, segments=log)
    store.recover()
    results: list[tuple[str, bool, int]] = []
    first = store.enqueue(Q1, "", "rk", b"", b"one")
    store.after_commit(lambda ok: results.append(("first", ok, len(log.batches))))
    await wait_for(log.entered)  # round 1 is writing and holds its batch
    second = store.enqueue(Q1, "", "rk", b"", b"two")
    third = store.enqueue(Q2, "", "rk", b"", b"three")
    store.after_commit(lambda ok: results.append(("second", ok, len(log.batches))))
    await asyncio.sleep(0.05)
    assert results == []  # nothing is confirmed while its round's write is in progress
    log.release.set()
    for _ in range(500):
        if len(results) == 2:
            break
        await asyncio.sleep(0.01)
    assert log.batches == [[first], [second, third]]
    assert results == [("first", True, 1), ("second", True, 2)]
    assert store.committer.rounds == 2
    await store.close()


# -- disk faults -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "written"),
    [(errno.ENOSPC, 0), (errno.ENOSPC, 10), (errno.ENOSPC, 300), (errno.EIO, None)],
    ids=["enospc-nothing", "enospc-torn-header", "enospc-torn-record", "eio-at-fsync"],
)
async def test_a_failed_round_reports_false_and_later_rounds_survive(
    faulty: Harness, error: int, written: int | None
) -> None:
    """A failed write (nothing, part or all of the batch on disk) nacks that round only:
    later rounds are confirmed and recoverable, never hidden behind a partial record."""
    assert faulty.log is not None
    kept = [faulty.enqueue(Q1, body(i, 200)) for i in range(3)]
    assert await faulty.commit() is True
    faulty.log.fail_next_write(error, written)
    doomed = [faulty.enqueue(Q1, body(i, 200)) for i in range(3)]
    assert await faulty.commit() is False
    assert faulty.file.committer.failed
    later = [faulty.enqueue(Q2, body(i, 200)) for i in range(3)]
    assert await faulty.commit() is True
    assert not faulty.file.committer.failed
    recovered = await faulty.restart()
    # The failed batch is uncertain; everything confirmed must be there, in order.
    ids = {m.id for messages in recovered.values() for m in messages}
    maybe = [m for m in doomed if m.id in ids]
    assert recovered == expected([*kept, *maybe, *later])


@pytest.mark.parametrize("written", [0, 3, 7, 8, 9])
async def test_a_failed_first_write_to_a_new_segment_leaves_it_usable(
    faulty: Harness, written: int
) -> None:
    """The failing batch is the first in its segment: the disk takes `written` bytes of the
    8-byte file header and what follows. Records confirmed later in that segment must not
    sit behind a torn header (recovery moves such a file aside whole)."""
    assert faulty.log is not None
    faulty.log.fail_next_write(errno.ENOSPC, written)
    faulty.enqueue(Q1, b"not confirmed")
    assert await faulty.commit() is False
    later = faulty.enqueue(Q1, b"confirmed")
    assert await faulty.commit() is True
    recovered = await faulty.restart()
    assert [m.id for m in recovered.get(Q1, [])] == [later.id]
    assert recovered == expected([later])


async def test_when_a_failed_write_cannot_be_undone_nothing_confirmed_is_lost(
    faulty: Harness,
) -> None:
    assert faulty.log is not None
    kept = [faulty.enqueue(Q1, body(i, 200)) for i in range(3)]
    assert await faulty.commit() is True
    faulty.log.fail_next_write(errno.EIO, 150, undo_fails=True)
    faulty.enqueue(Q1, body(0, 400))  # torn after 150 bytes
    assert await faulty.commit() is False
    # The log cannot vouch for what follows a torn record: it must refuse, not confirm.
    refused = faulty.enqueue(Q1, b"refused")
    assert await faulty.commit() is False
    recovered = await faulty.restart()
    assert recovered == expected(kept)
    assert refused.id not in {m.id for m in recovered.get(Q1, [])}
    later = faulty.enqueue(Q2, b"after the restart")
    assert await faulty.commit() is True
    assert await faulty.restart() == expected([*kept, later])


async def test_a_delivery_mark_lost_in_a_failed_round_is_written_again(faulty: Harness) -> None:
    """delivered() after a round that lost the first DELIVERED record must record it again:
    the store may skip a second mark only once the first one is known to be on disk."""
    assert faulty.log is not None
    message = faulty.enqueue(Q1, b"delivered twice")
    assert await faulty.commit() is True
    faulty.log.fail_next_write(errno.EIO)
    faulty.store.delivered(Q1, message.id)
    assert await faulty.commit() is False
    faulty.store.delivered(Q1, message.id)  # delivered again, say after a requeue
    assert await faulty.commit() is True
    assert await faulty.restart() == expected([message], redelivered={message.id})


async def test_a_waiter_that_joins_while_a_failing_round_runs_hears_false(
    faulty: Harness,
) -> None:
    """after_commit promises True only once everything appended before it is on disk. A
    message appended on one loop turn whose round starts before the waiter is registered
    (the broker registers confirms on a later turn) must not be confirmed if that round
    fails and the waiter's own, later round succeeds."""
    assert faulty.log is not None
    faulty.log.fail_next_write(errno.EIO)
    faulty.enqueue(Q1, b"lost")
    await asyncio.sleep(0)  # the committer's round starts, holding the message
    assert not faulty.file.committer.idle
    assert await faulty.commit() is False


async def test_a_crash_tears_the_batch_and_restart_keeps_what_was_confirmed(
    faulty: Harness,
) -> None:
    assert faulty.log is not None
    confirmed = [faulty.enqueue(Q1, body(i, 100)) for i in range(5)]
    assert await faulty.commit() is True
    pending = [faulty.enqueue(Q1, body(i, 100)) for i in range(5, 10)]
    faulty.store.remove(Q1, confirmed[0].id)
    faulty.log.crash_next_write(written=sum(m.encoded_size() for m in pending) // 2)
    assert await faulty.commit() is False
    assert faulty.log.crashed
    faulty.enqueue(Q2, b"after the crash")
    assert await faulty.commit() is False  # the "dead" disk takes nothing more
    faulty.crash()
    recovered = faulty.reopen()
    ids = [m.id for m in recovered[Q1]]
    # All confirmed ones are there; the first few of the torn batch may be; the REMOVE,
    # written after them, is lost with the torn tail.
    assert ids[:5] == [m.id for m in confirmed]
    assert ids[5:] == [m.id for m in pending[: len(ids) - 5]]
    assert 0 < len(ids) - 5 < len(pending)
    assert Q2 not in recovered


# -- reading back (deep queues) ----------------------------------------------------------------


def contents(harness: Harness, sent: list[Sent]) -> list[tuple[bytes, bytes] | None]:
    read = harness.store.read(Q1, [m.id for m in sent])
    return [(c.header, c.body) if c is not None else None for c in read]


async def test_read_follows_a_message_that_compaction_moved(files: Harness) -> None:
    sent, keep = await sparse_old_segment(files)
    where = segment_of(files.directory)
    for message in sent:
        if where[message.id] == 1 and message is not keep:
            files.store.remove(Q1, message.id)
    live = [m for m in sent if where[m.id] != 1 or m is keep]
    # Mid-compaction (the copy not yet on disk, or just written): still readable.
    assert contents(files, live) == [(m.header, m.body) for m in live]
    await settle(files)
    assert not (files.directory / f"{1:012d}.log").exists()
    # No descriptor kept on a deleted file.
    assert 1 not in files.file._segments._readers and 1 not in files.file._segments._loop_readers
    assert contents(files, live) == [(m.header, m.body) for m in live]


async def three_with_the_second_corrupted(files: Harness) -> list[Sent]:
    """Three committed messages; then a byte inside the second's record is flipped."""
    sent = [files.enqueue(Q1, body(i, 300)) for i in range(3)]
    assert await files.commit() is True
    path = segment_files(files.directory)[0]
    offsets = [offset for offset, _ in records.scan(path.read_bytes())]
    corrupt_byte(path, offsets[1] + 60)  # inside the second record
    return sent


async def test_a_corrupted_record_reads_as_none_and_is_logged(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    sent = await three_with_the_second_corrupted(files)
    assert contents(files, sent) == [
        (sent[0].header, sent[0].body),
        None,
        (sent[2].header, sent[2].body),
    ]
    assert f"message {sent[1].id}: no valid record" in caplog.text


async def test_neighbours_share_a_read_and_a_big_record_comes_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness.open("file", tmp_path / "store", segment_bytes=4 * 1024 * 1024)
    try:
        small = [harness.enqueue(Q1, body(i, 500)) for i in range(100)]
        big = harness.enqueue(Q1, os.urandom(3 * record_reads.READ_GAP_BYTES))
        after = harness.enqueue(Q1, b"after the big one")
        assert await harness.commit() is True
        calls: list[int] = []
        real_pread = os.pread

        def counting(fd: int, size: int, offset: int) -> bytes:
            calls.append(size)
            return real_pread(fd, size, offset)

        monkeypatch.setattr(segments.os, "pread", counting)
        wanted = [*small, big, after]
        assert contents(harness, wanted) == [(m.header, m.body) for m in wanted]
        # One pread for the file header, one for the small ones and the big one's start, one
        # for the big one whole, one for the record after it: not one per message.
        assert len(calls) <= 5, calls
    finally:
        await harness.close()


async def test_read_descriptors_are_bounded(tmp_path: Path) -> None:
    harness = Harness.open("file", tmp_path / "store", segment_bytes=512)
    try:
        sent = [harness.enqueue(Q1, body(i, 400)) for i in range(3 * segments.READERS_MAX)]
        assert await harness.commit() is True
        assert len(set(segment_of(harness.directory).values())) > segments.READERS_MAX
        assert contents(harness, sent) == [(m.header, m.body) for m in sent]
        assert len(harness.file._segments._readers) <= segments.READERS_MAX
    finally:
        await harness.close()


async def test_messages_wanted_next_are_fetched_ahead(
    files: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise on this platform")
    sent = [files.enqueue(Q1, body(i, 100)) for i in range(40)]  # several segments
    assert await files.commit() is True
    advised: list[tuple[int, int]] = []

    def advise(_fd: int, offset: int, length: int, _advice: int) -> None:
        advised.append((offset, length))

    monkeypatch.setattr(segments.os, "posix_fadvise", advise)
    now, ahead = sent[:5], sent[5:]
    read = files.store.read(Q1, [m.id for m in now], [m.id for m in ahead])
    assert [(c.header, c.body) if c else None for c in read] == [(m.header, m.body) for m in now]
    # One hint per segment, from the first record of `ahead` in it past the last one.
    spans: dict[int, list[int]] = {}
    for path in segment_files(files.directory):
        for offset, record in records.scan(path.read_bytes()):
            if record.id in {m.id for m in ahead}:
                spans.setdefault(int(path.stem), []).append(offset)
    assert len(spans) > 1
    expected_hints = sorted(
        (min(offsets), max(offsets) - min(offsets) + record_reads.READ_GAP_BYTES)
        for offsets in spans.values()
    )
    assert sorted(advised) == expected_hints


class ReadGatedLog(SegmentLog):
    """Reads back (on the store's reader thread) wait for the test to open the gate; the
    page cache holds nothing, so the loop never reads for itself."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.threads: set[str] = set()

    def read(
        self, number: int, offsets: list[int], *, cached_only: bool = False
    ) -> list[records.Record | None]:
        if cached_only:
            raise BlockingIOError("a slow disk: nothing in the page cache")
        self.threads.add(threading.current_thread().name)
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        return super().read(number, offsets)


async def gated_store(directory: Path) -> tuple[Harness, ReadGatedLog]:
    loop = asyncio.get_running_loop()
    log = ReadGatedLog(directory)
    store = FileStore(
        directory, loop, segment_bytes=SEGMENT_BYTES, segments=log, compact_settle_s=0
    )
    store.recover()
    return Harness("file", directory, loop, store, SEGMENT_BYTES), log


async def test_the_loop_goes_on_while_a_read_waits_for_the_disk(tmp_path: Path) -> None:
    files, log = await gated_store(tmp_path)
    try:
        sent = [files.enqueue(Q1, body(i, 300)) for i in range(4)]
        assert await files.commit() is True
        answered: list[list[Content | None]] = []
        files.store.read_later(Q1, [m.id for m in sent], [], answered.append)
        await wait_for(log.entered)
        # The disk holds the read; the loop still commits, and reads what is in memory.
        late = files.enqueue(Q1, b"late")
        assert await files.commit() is True
        pending = files.enqueue(Q1, b"pending")
        assert await files.read_later(Q1, [pending.id]) == [content_of(pending)]
        assert answered == []
        log.gate.set()
        while not answered:
            await asyncio.sleep(0.001)
        assert answered == [[content_of(m) for m in sent]]
        assert log.threads and threading.current_thread().name not in log.threads
        assert await files.read_later(Q1, [late.id]) == [content_of(late)]
    finally:
        log.gate.set()
        await files.close()


async def test_a_segment_is_not_deleted_under_a_read_in_flight(tmp_path: Path) -> None:
    files, log = await gated_store(tmp_path)
    try:
        first = [files.enqueue(Q1, body(i, 1900)) for i in range(2)]  # segment 1
        rest = [files.enqueue(Q1, body(i, 1900)) for i in range(2, 6)]  # segments 2 and 3
        assert await files.commit() is True
        assert {segment_of(tmp_path)[m.id] for m in first} == {1}
        answered: list[list[Content | None]] = []
        files.store.read_later(Q1, [m.id for m in first], [rest[0].id], answered.append)
        await wait_for(log.entered)
        for message in first:  # segment 1 has nothing live: it would be deleted now
            files.store.remove(Q1, message.id)
        assert await files.commit() is True
        assert (tmp_path / f"{1:012d}.log").exists()  # pinned by the read in flight
        log.gate.set()
        while not answered:
            await asyncio.sleep(0.001)
        assert answered == [[content_of(m) for m in first]]
        assert await files.commit() is True  # what waited for the read goes now
        assert not (tmp_path / f"{1:012d}.log").exists()
        assert 1 not in files.file._segments._readers
        assert 1 not in files.file._segments._loop_readers
        assert files.store.read(Q1, [m.id for m in rest]) == [content_of(m) for m in rest]
    finally:
        log.gate.set()
        await files.close()


async def test_a_read_later_of_a_corrupted_record_gives_none_for_it_alone(
    files: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    sent = await three_with_the_second_corrupted(files)
    got = await files.read_later(Q1, [m.id for m in sent])
    assert got == [content_of(sent[0]), None, content_of(sent[2])]
    assert f"message {sent[1].id}: no valid record" in caplog.text


def content_of(message: Sent) -> Content:
    return Content(message.exchange, message.routing_key, message.header, message.body)
