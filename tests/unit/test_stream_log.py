"""A stream queue's log on disk (kanin/store/stream_log.py, with stream_reads.py): appends,
commits, reads from every kind of offset, segment roll-over, retention, recovery and what a
crash leaves. Real files under tmp_path, a real asyncio loop, no sockets.

"Reopen" is close + a new StreamLog on the same directory + recover().
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from kanin.store import records, stream_index, stream_log
from kanin.store.stream_log import StreamLog, StreamRecord
from kanin.store.stream_reads import READ_CHUNK_BYTES, SpanReader

SRC = Path(__file__).resolve().parents[2] / "src"
SMALL_SEGMENT = 4096


def body_of(offset: int, size: int = 40) -> bytes:
    text = f"message {offset} ".encode()
    return (text * (size // len(text) + 1))[:size]


def header_of(offset: int) -> bytes:
    return b"\x00\x10" + offset.to_bytes(8, "big")


async def open_log(directory: Path, max_segment_bytes: int = SMALL_SEGMENT) -> StreamLog:
    log = StreamLog(directory, asyncio.get_running_loop(), max_segment_bytes=max_segment_bytes)
    log.recover()
    return log


@pytest.fixture
async def stream(tmp_path: Path) -> AsyncIterator[StreamLog]:
    log = await open_log(tmp_path / "stream")
    yield log
    await log.close()


def append(
    log: StreamLog, count: int, *, size: int = 40, ts: Callable[[int], int] | None = None
) -> list[int]:
    offsets = []
    for _ in range(count):
        offset = log.next_offset
        timestamp = ts(offset) if ts is not None else 1_000 + offset
        got = log.append("ex", f"rk.{offset}", header_of(offset), body_of(offset, size), timestamp)
        assert got == offset
        offsets.append(got)
    return offsets


async def commit(log: StreamLog) -> bool:
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    log.after_commit(done.set_result)
    return await done


async def read_later(
    log: StreamLog, start: int, max_records: int = 10**9, max_bytes: int = 10**12
) -> list[StreamRecord]:
    done: asyncio.Future[list[StreamRecord]] = asyncio.get_running_loop().create_future()
    log.read_later(start, max_records, max_bytes, done.set_result)
    return await done


def check(found: list[StreamRecord], offsets: list[int] | range, size: int = 40) -> None:
    assert [r.offset for r in found] == list(offsets)
    for r in found:
        assert r.body == body_of(r.offset, size), r.offset
        assert r.header == header_of(r.offset)
        assert (r.exchange, r.routing_key) == ("ex", f"rk.{r.offset}")


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def read_all_now(log: StreamLog, start: int = 0) -> list[StreamRecord]:
    """Everything from `start`, with the blocking read: a batch may stop short at a plan's
    last segment (SPANS_PER_READ), so it reads on until a batch is empty."""
    found: list[StreamRecord] = []
    while batch := log.read(start, 10**6, 10**12):
        found.extend(batch)
        start = batch[-1].offset + 1
    return found


async def read_all(log: StreamLog, start: int = 0, batch: int = 1000) -> list[StreamRecord]:
    found: list[StreamRecord] = []
    while True:
        got = await read_later(log, start, batch)
        if not got:
            return found
        found.extend(got)
        start = got[-1].offset + 1


# -- appending and reading back ---------------------------------------------------------------


async def test_append_commit_read_round_trip(stream: StreamLog) -> None:
    assert (stream.first_offset, stream.next_offset, stream.committed_offset) == (0, 0, 0)
    offsets = append(stream, 10)
    assert offsets == list(range(10))
    assert stream.next_offset == 10
    # Not committed yet: no reader sees them.
    assert stream.committed_offset == 0
    assert stream.read(0, 100, 10**9) == []
    assert await commit(stream) is True
    assert stream.committed_offset == 10
    check(stream.read(0, 100, 10**9), range(10))
    check(await read_later(stream, 0), range(10))
    assert [r.timestamp_ms for r in stream.read(0, 100, 10**9)] == [1_000 + i for i in range(10)]


async def test_a_read_before_the_commit_sees_nothing_and_on_committed_wakes(
    stream: StreamLog,
) -> None:
    woken: list[int] = []
    stream.on_committed(lambda: woken.append(stream.committed_offset))
    append(stream, 3)
    assert await read_later(stream, 0) == []
    assert await commit(stream) is True
    assert woken == [3]
    check(await read_later(stream, 0), range(3))


async def test_read_later_never_answers_inline(tmp_path: Path) -> None:
    log = await open_log(tmp_path / "s")
    append(log, 2000)
    assert await commit(log)
    await log.close()
    log = await open_log(tmp_path / "s")  # empty tail cache: 0.. come from disk
    append(log, 5)
    assert await commit(log)
    try:
        for start in (0, 1500, 2000, 2004, 2005, 9999):
            answers: asyncio.Queue[list[StreamRecord]] = asyncio.Queue()
            log.read_later(start, 10, 10**9, answers.put_nowait)
            assert answers.empty(), start  # not inline
            found = await asyncio.wait_for(answers.get(), 10)
            await asyncio.sleep(0.01)
            assert answers.empty(), start  # and once
            check(found, range(start, min(start + 10, 2005)))
    finally:
        await log.close()


async def test_reads_from_every_kind_of_start(tmp_path: Path) -> None:
    log = await open_log(tmp_path / "s")
    append(log, 3000)
    assert await commit(log)
    await log.close()
    log = await open_log(tmp_path / "s")  # everything on disk, nothing cached
    try:
        assert len(log._index.segments) > 5
        check(log.read(0, 5, 10**9), range(5))  # the first
        check(log.read(1500, 5, 10**9), range(1500, 1505))  # the middle
        segment = log._index.segments[3]
        for start in (segment.first_offset, segment.last_offset):  # a segment's edges
            check(log.read(start, 3, 10**9), range(start, start + 3))
        check(log.read(2998, 5, 10**9), [2998, 2999])  # the last
        assert log.read(3000, 5, 10**9) == []  # past committed
        assert log.read(10**6, 5, 10**9) == []
        # Before the first after retention: from the first still there.
        assert log.apply_retention(max_bytes=log.size_bytes() // 2, max_age_ms=None, now_ms=0) > 0
        first = log.first_offset
        assert first > 0
        check(log.read(0, 5, 10**9), range(first, first + 5))
        check(await read_later(log, 0, 5), range(first, first + 5))
    finally:
        await log.close()


async def test_batches_respect_the_record_and_byte_limits(stream: StreamLog) -> None:
    append(stream, 50, size=100)
    assert await commit(stream)
    check(await read_later(stream, 10, 4), range(10, 14), 100)
    check(await read_later(stream, 10, 100, 250), [10, 11], 100)
    check(await read_later(stream, 10, 100, 300), [10, 11, 12], 100)
    check(await read_later(stream, 10, 100, 1), [10], 100)  # at least one record
    # The same from disk.
    check(stream.read(10, 4, 10**9), range(10, 14), 100)
    stream._tail.reset(stream.next_offset)
    check(stream.read(10, 100, 250), [10, 11], 100)
    check(stream.read(10, 100, 1), [10], 100)
    check(await read_later(stream, 10, 100, 300), [10, 11, 12], 100)


async def test_the_tail_cache_answers_without_the_reader_thread(
    stream: StreamLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    append(stream, 500)
    assert await commit(stream)

    def no_disk(number: int, position: int, size: int) -> tuple[bytes, int]:
        raise AssertionError("the tail read went to the disk")

    monkeypatch.setattr(stream, "_span_reader", SpanReader(no_disk))
    check(await read_later(stream, 0, 1000), range(500))
    check(await read_later(stream, 499), [499])
    append(stream, 1)
    assert await commit(stream)
    check(await read_later(stream, 500), [500])


async def test_a_reader_behind_the_tail_cache_reads_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_log, "TAIL_CACHE_BYTES", 20_000)
    log = await open_log(tmp_path / "s")
    try:
        threads: set[str] = set()
        read_span = log._segments.read_span

        def spy(number: int, position: int, size: int) -> tuple[bytes, int]:
            threads.add(threading.current_thread().name)
            return read_span(number, position, size)

        monkeypatch.setattr(log, "_span_reader", SpanReader(spy))
        append(log, 2000, size=100)
        assert await commit(log)
        assert log._tail.first > 0
        check(
            await read_later(log, log._tail.first - 1, 2),
            [log._tail.first - 1, log._tail.first],
            100,
        )
        assert threads and all(name.startswith("kanin-stream-read") for name in threads)
        threads.clear()
        check(
            await read_later(log, log._tail.first, 2), [log._tail.first, log._tail.first + 1], 100
        )
        assert threads == set()
    finally:
        await log.close()


async def test_a_200k_record_log_reads_back_whole_in_batches(tmp_path: Path) -> None:
    log = await open_log(tmp_path / "s", max_segment_bytes=1_000_000)
    count = 200_000
    for _ in range(count // 10_000):
        append(log, 10_000, size=16)
        assert await commit(log)
    await log.close()
    log = await open_log(tmp_path / "s", max_segment_bytes=1_000_000)
    try:
        assert (log.first_offset, log.next_offset) == (0, count)
        reads = 0
        read_span = log._span_reader._read_span

        def counted(number: int, position: int, size: int) -> tuple[bytes, int]:
            nonlocal reads
            reads += 1
            return read_span(number, position, size)

        log._span_reader._read_span = counted
        found = await read_all(log, batch=777)
        check(found, range(count), 16)
        # Sequential batches continue from where the last ended, in the kept chunks.
        on_disk = sum(path.stat().st_size for path in segment_files(log.directory))
        assert reads <= on_disk // READ_CHUNK_BYTES + 2 * len(segment_files(log.directory))
        # The blocking read agrees, in other batch sizes.
        start, got = 0, 0
        while start < count:
            batch = log.read(start, 5000, 10**9)
            assert batch[0].offset == start and batch[-1].offset == start + len(batch) - 1
            got += len(batch)
            start = batch[-1].offset + 1
        assert got == count
    finally:
        await log.close()


# -- segments and retention -----------------------------------------------------------------


async def test_a_new_segment_starts_once_the_current_one_is_full(stream: StreamLog) -> None:
    append(stream, 200, size=100)
    assert await commit(stream)
    files = segment_files(stream.directory)
    assert len(files) > 3
    record_bytes = len(records.encode_enqueue(0, "", "ex", "rk.100", header_of(0), body_of(0, 100)))
    for path in files[:-1]:
        size = path.stat().st_size
        # At least the limit, and only the record that crossed it went past.
        assert SMALL_SEGMENT <= size < SMALL_SEGMENT + record_bytes, (path, size)
    assert files[-1].stat().st_size < SMALL_SEGMENT + record_bytes
    assert [s.number for s in stream._index.segments] == [int(p.stem) for p in files]
    assert stream.size_bytes() == sum(path.stat().st_size for path in files)


async def test_retention_by_bytes_removes_the_oldest_whole_segments(stream: StreamLog) -> None:
    append(stream, 400, size=100)
    assert await commit(stream)
    files = segment_files(stream.directory)
    total = stream.size_bytes()
    assert stream.apply_retention(max_bytes=None, max_age_ms=None, now_ms=0) == 0
    assert stream.apply_retention(max_bytes=total, max_age_ms=None, now_ms=0) == 0
    limit = total - 2 * SMALL_SEGMENT
    removed = stream.apply_retention(max_bytes=limit, max_age_ms=None, now_ms=0)
    assert removed >= 2
    assert stream.size_bytes() <= limit
    # One fewer would have been over the limit: no more than needed went.
    assert stream.size_bytes() + files[removed - 1].stat().st_size > limit
    assert stream.first_offset == stream._index.segments[0].first_offset > 0
    check(stream.read(0, 3, 10**9), range(stream.first_offset, stream.first_offset + 3), 100)
    await commit(stream)  # the files go in the next commit round
    await stream.committer.drain()
    assert segment_files(stream.directory) == files[removed:]


async def test_retention_by_age_uses_each_segments_newest_record(stream: StreamLog) -> None:
    append(stream, 300, size=100, ts=lambda offset: 10_000 + offset * 10)
    assert await commit(stream)
    segments = list(stream._index.segments)
    cut = segments[2]
    # now - max_age falls just after segment 2's newest record: 0, 1 and 2 go.
    now = cut.last_ts + 1 + 60_000
    assert stream.apply_retention(max_bytes=None, max_age_ms=60_000, now_ms=now) == 3
    assert stream.first_offset == segments[3].first_offset
    assert stream.apply_retention(max_bytes=None, max_age_ms=60_000, now_ms=now) == 0
    # Everything is old now, but the newest segment stays.
    assert stream.apply_retention(max_bytes=None, max_age_ms=0, now_ms=10**12) == len(segments) - 4
    assert [s.number for s in stream._index.segments] == [segments[-1].number]


async def test_retention_waits_for_a_disk_read_in_flight_to_delete_files(
    tmp_path: Path,
) -> None:
    log = await open_log(tmp_path / "s")
    append(log, 300, size=100)
    assert await commit(log)
    await log.close()
    log = await open_log(tmp_path / "s")
    try:
        release = threading.Event()
        read_span = log._segments.read_span

        def held(number: int, position: int, size: int) -> tuple[bytes, int]:
            release.wait(10)
            return read_span(number, position, size)

        # A reader of its own rather than a patched method: the compiled build's are fixed.
        log._span_reader = SpanReader(held)
        done: asyncio.Future[list[StreamRecord]] = asyncio.get_running_loop().create_future()
        log.read_later(0, 5, 10**9, done.set_result)
        first_file = segment_files(log.directory)[0]
        assert log.apply_retention(max_bytes=0, max_age_ms=None, now_ms=0) > 0
        append(log, 1)
        assert await commit(log)
        await log.committer.drain()
        assert first_file.exists()  # pinned by the read in flight
        release.set()
        check(await done, range(5), 100)
        append(log, 1)
        assert await commit(log)
        await log.committer.drain()
        assert not first_file.exists()
        assert len(segment_files(log.directory)) == 2  # the newest with records, and the new
    finally:
        await log.close()


# -- recovery -------------------------------------------------------------------------------


@pytest.mark.usefixtures("segment_reading")
async def test_reopening_finds_the_same_offsets_and_contents(tmp_path: Path) -> None:
    log = await open_log(tmp_path / "s")
    append(log, 700, ts=lambda offset: 5_000 + offset // 3)
    assert await commit(log)
    before = log.read(0, 10**6, 10**12)
    index_before = [
        (s.number, s.first_offset, s.last_offset, s.first_ts, s.last_ts, s.end, list(s.offsets))
        for s in log._index.segments
    ]
    await log.close()
    log = await open_log(tmp_path / "s")
    try:
        assert (log.first_offset, log.next_offset, log.committed_offset) == (0, 700, 700)
        assert read_all_now(log) == before
        index_after = [
            (s.number, s.first_offset, s.last_offset, s.first_ts, s.last_ts, s.end, list(s.offsets))
            for s in log._index.segments
        ]
        assert index_after == index_before
        # Appends go on, in a fresh segment.
        assert append(log, 2) == [700, 701]
        assert await commit(log)
        assert log._index.segments[-1].number > index_before[-1][0]
        check(await read_all(log), range(702))
    finally:
        await log.close()


@pytest.mark.usefixtures("segment_reading")
async def test_a_torn_tail_is_cut_on_recovery(tmp_path: Path) -> None:
    log = await open_log(tmp_path / "s", max_segment_bytes=10**6)
    append(log, 20)
    assert await commit(log)
    await log.close()
    (newest,) = segment_files(tmp_path / "s")
    size = newest.stat().st_size
    last = records.encode_enqueue(19, "", "ex", "rk.19", header_of(19), body_of(19), 0, 1_019)
    # A crash in the middle of the last record's write: half of it is there.
    with open(newest, "r+b") as file:
        file.truncate(size - len(last) // 2)
    log = await open_log(tmp_path / "s", max_segment_bytes=10**6)
    try:
        assert newest.stat().st_size == size - len(last)
        assert log.next_offset == 19
        check(log.read(0, 100, 10**9), range(19))
        assert append(log, 1) == [19]
        assert await commit(log)
        check(await read_all(log), range(20))
    finally:
        await log.close()


@pytest.mark.usefixtures("segment_reading")
async def test_a_damaged_record_costs_only_itself(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = await open_log(tmp_path / "s", max_segment_bytes=10**6)
    append(log, 20)
    assert await commit(log)
    await log.close()
    (path,) = segment_files(tmp_path / "s")
    data = bytearray(path.read_bytes())
    position = next(pos for pos, record in records.scan(bytes(data)) if record.id == 7)
    data[position + 30] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.ERROR):
        log = await open_log(tmp_path / "s", max_segment_bytes=10**6)
    try:
        check(log.read(0, 100, 10**9), [o for o in range(20) if o != 7])
        check(log.read(7, 100, 10**9), range(8, 20))
        assert log.next_offset == 20
        assert any("corrupt" in message for message in caplog.messages)
    finally:
        await log.close()


async def test_damage_after_recovery_skips_to_the_next_index_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(stream_index, "INDEX_EVERY", 8)
    log = await open_log(tmp_path / "s", max_segment_bytes=10**6)
    append(log, 40)
    assert await commit(log)
    await log.close()
    log = await open_log(tmp_path / "s", max_segment_bytes=10**6)
    try:
        (path,) = segment_files(tmp_path / "s")
        data = bytearray(path.read_bytes())
        position = next(pos for pos, record in records.scan(bytes(data)) if record.id == 10)
        data[position + 30] ^= 0xFF
        path.write_bytes(bytes(data))
        with caplog.at_level(logging.ERROR):
            found = log.read(0, 100, 10**9)
        # 10..15 are lost (the next index entry is 16); the rest come back.
        check(found, [*range(10), *range(16, 40)])
        assert any("no valid record" in message for message in caplog.messages)
    finally:
        await log.close()


async def test_a_failed_round_leaves_a_hole_that_is_never_seen(
    stream: StreamLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    append(stream, 5)
    assert await commit(stream)
    write = stream._segments.write

    def failing(*_: object, **__: object) -> list[int]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(stream._segments, "write", failing)
    append(stream, 5)
    assert await commit(stream) is False
    assert stream.committed_offset == 5
    # The committer said they are lost (on_lost): memory lets go of them at once.
    assert stream._tail._entries[5:10] == [None] * 5
    check(stream.read(0, 100, 10**9), range(5))
    monkeypatch.setattr(stream._segments, "write", write)
    append(stream, 5)
    assert await commit(stream) is True
    assert stream.committed_offset == 15
    expected = [*range(5), *range(10, 15)]
    check(await read_all(stream), expected)
    check(await read_later(stream, 6, 2), [10, 11])
    directory = stream.directory
    await stream.close()
    reopened = await open_log(directory)
    try:
        assert reopened.next_offset == 15
        check(reopened.read(0, 100, 10**9), expected)
    finally:
        await reopened.close()


async def test_next_offsets_continue_after_retention_removed_all_it_may(tmp_path: Path) -> None:
    log = await open_log(tmp_path / "s")
    append(log, 100, size=100)
    assert await commit(log)
    await log.close()
    log = await open_log(tmp_path / "s")
    # A fresh segment is being written, but has nothing yet: the newest with records stays.
    assert log.apply_retention(max_bytes=0, max_age_ms=0, now_ms=10**12) > 0
    assert len(log._index.segments) == 1
    await commit(log)
    await log.close()
    for _ in range(2):
        log = await open_log(tmp_path / "s")
        assert log.next_offset == 100
        assert log.first_offset == log._index.segments[0].first_offset
        await log.close()
    log = await open_log(tmp_path / "s")
    try:
        assert append(log, 50, size=100)[0] == 100
        assert await commit(log)
        assert log.apply_retention(max_bytes=0, max_age_ms=None, now_ms=0) > 0
        await commit(log)
        await log.close()
        log = await open_log(tmp_path / "s")
        assert log.next_offset == 150
        check(await read_all(log), range(log.first_offset, 150), 100)
        assert append(log, 1) == [150]
    finally:
        await log.close()


async def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = await open_log(tmp_path / "s", max_segment_bytes=20_000)
    stamps = {offset: 1_000_000 + (offset // 2) * 10 for offset in range(5000)}
    append(log, 5000, size=16, ts=stamps.__getitem__)

    def exact(wanted: int) -> int:
        return next((o for o in range(5000) if stamps[o] >= wanted), 5000)

    try:
        # Not committed: the answer is in memory, exact.
        assert log.offset_for_timestamp(1_000_000 + 1000) == exact(1_000_000 + 1000)
        assert await commit(log)
        for wanted in (0, 1_000_000, 1_000_005, 1_010_000, 1_024_990, 1_024_991, 10**12):
            assert log.offset_for_timestamp(wanted) == exact(wanted), wanted
        await log.close()
        log = await open_log(tmp_path / "s", max_segment_bytes=20_000)  # from the index only
        for wanted in (0, 1_000_000, 1_000_005, 1_010_000, 1_024_990, 1_024_991, 10**12):
            found = log.offset_for_timestamp(wanted)
            assert exact(wanted) - stream_index.INDEX_EVERY < found <= exact(wanted), wanted
        assert log.offset_for_timestamp(10**12) == log.next_offset == 5000
        # A clock that steps back does not make the log's timestamps go down.
        log.append("ex", "rk", b"", b"", 5)
        assert await commit(log)
        assert log.read(5000, 1, 10**9)[0].timestamp_ms == stamps[4999]
    finally:
        await log.close()


async def test_delete_removes_the_streams_files(tmp_path: Path) -> None:
    log = await open_log(tmp_path / "s")
    append(log, 100)
    assert await commit(log)
    await log.close()
    log.delete()
    assert not (tmp_path / "s").exists()


# -- a real crash ---------------------------------------------------------------------------

WRITER = """
import asyncio, sys
from pathlib import Path
from kanin.store.stream_log import StreamLog

def body_of(offset):
    text = f"message {offset} ".encode()
    return (text * (40 // len(text) + 1))[:40]

async def main():
    log = StreamLog(Path(sys.argv[1]), asyncio.get_running_loop(), max_segment_bytes=50_000)
    log.recover()
    print("start", log.next_offset, flush=True)
    while True:
        batch = [log.append("ex", "rk", b"h", body_of(log.next_offset), 1) for _ in range(20)]
        done = asyncio.get_running_loop().create_future()
        log.after_commit(done.set_result)
        if await done:
            print(" ".join(map(str, batch)), flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("confirmed_lines", [60, 97])
async def test_kill_9_keeps_every_confirmed_offset(tmp_path: Path, confirmed_lines: int) -> None:
    """A writer prints each batch of offsets once after_commit said True, and is killed with
    SIGKILL mid-run, three times over: every printed offset is there with its content, and
    each start gives out offsets past everything confirmed before."""
    directory = tmp_path / "s"
    confirmed: list[int] = []
    for _ in range(3):
        process = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(directory)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
        assert process.stdout is not None
        lines = 0
        for line in process.stdout:
            if line.startswith("start"):
                start = int(line.split()[1])
                assert start > max(confirmed, default=-1)
                continue
            confirmed.extend(map(int, line.split()))
            lines += 1
            if lines == confirmed_lines:
                process.send_signal(signal.SIGKILL)
                break
        process.wait()
        assert process.returncode == -signal.SIGKILL
        # What was printed before the kill landed is confirmed too.
        for line in process.stdout:
            confirmed.extend(map(int, line.split()))
        process.stdout.close()
    assert len(set(confirmed)) == len(confirmed)  # no offset confirmed twice
    log = await open_log(directory, max_segment_bytes=50_000)
    try:
        found = {r.offset: r for r in await read_all(log)}
        missing = set(confirmed) - set(found)
        assert not missing
        for offset in confirmed:
            assert found[offset].body == body_of(offset)
        assert log.next_offset > max(confirmed)
    finally:
        await log.close()
