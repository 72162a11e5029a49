"""Reads the page cache answers whole are done on the loop, without the reader thread; any
read that would wait for the disk, or is big, still goes to the thread, with the same
answer (kanin/store/record_reads.py, FileStore._read_cached)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from kanin.store import record_reads, records
from kanin.store.api import Content
from kanin.store.file_store import LOOP_READ_MAX, FileStore
from kanin.store.segments import SegmentLog
from store_harness import Q1, SEGMENT_BYTES, Harness, Sent, body

needs_nowait = pytest.mark.skipif(
    not hasattr(os, "RWF_NOWAIT"), reason="reads from the page cache only need RWF_NOWAIT"
)


class WatchedLog(SegmentLog):
    """Notes which thread each read ran on, and whether it was a page-cache-only read;
    with `cold`, the page cache holds nothing."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.reads: list[tuple[str, bool]] = []
        self.cold = False

    def read(
        self, number: int, offsets: list[int], *, cached_only: bool = False
    ) -> list[records.Record | None]:
        self.reads.append((threading.current_thread().name, cached_only))
        if cached_only and self.cold:
            raise BlockingIOError("not in the page cache")
        return super().read(number, offsets, cached_only=cached_only)


async def watched_store(directory: Path) -> tuple[Harness, WatchedLog]:
    loop = asyncio.get_running_loop()
    log = WatchedLog(directory)
    store = FileStore(directory, loop, segment_bytes=SEGMENT_BYTES, segments=log)
    store.recover()
    return Harness("file", directory, loop, store, SEGMENT_BYTES), log


def content_of(message: Sent) -> Content:
    return Content(message.exchange, message.routing_key, message.header, message.body)


@needs_nowait
async def test_a_small_read_of_what_was_just_written_is_answered_on_the_loop(
    tmp_path: Path,
) -> None:
    files, log = await watched_store(tmp_path)
    try:
        sent = [files.enqueue(Q1, body(i, 300)) for i in range(20)]
        assert await files.commit() is True
        assert await files.read_later(Q1, [m.id for m in sent]) == [content_of(m) for m in sent]
        loop_thread = threading.current_thread().name
        assert log.reads and all(read == (loop_thread, True) for read in log.reads)
    finally:
        await files.close()


async def test_a_big_read_goes_to_the_reader_thread(tmp_path: Path) -> None:
    files, log = await watched_store(tmp_path)
    try:
        sent = [files.enqueue(Q1, body(i, 50)) for i in range(LOOP_READ_MAX + 1)]
        assert await files.commit() is True
        assert await files.read_later(Q1, [m.id for m in sent]) == [content_of(m) for m in sent]
        loop_thread = threading.current_thread().name
        assert log.reads and all(name != loop_thread for name, _ in log.reads)
    finally:
        await files.close()


async def test_a_read_that_needs_the_disk_goes_to_the_reader_thread_with_the_same_answer(
    tmp_path: Path,
) -> None:
    files, log = await watched_store(tmp_path)
    try:
        sent = [files.enqueue(Q1, body(i, 300)) for i in range(20)]
        assert await files.commit() is True
        log.cold = True
        got = await files.read_later(Q1, [m.id for m in sent])
        assert got == [content_of(m) for m in sent]
        loop_thread = threading.current_thread().name
        assert log.reads[0] == (loop_thread, True)  # tried from the cache: not there
        thread_reads = log.reads[1:]
        assert thread_reads and all(
            name != loop_thread and not cached for name, cached in thread_reads
        )
    finally:
        await files.close()


@needs_nowait
def test_a_page_cache_read_says_so_when_the_bytes_are_not_there(tmp_path: Path) -> None:
    data = [records.encode_enqueue(i, "q", "", "k", b"\x00" * 14, b"x" * 100) for i in (1, 2)]
    offsets = [len(records.FILE_HEADER), len(records.FILE_HEADER) + len(data[0])]
    path = tmp_path / "segment"
    path.write_bytes(records.FILE_HEADER + b"".join(data))
    fd = os.open(path, os.O_RDONLY)
    try:
        version = records.VERSION
        warm = record_reads.read_records(fd, version, offsets, cached_only=True)
        assert [record.id for record in warm if record is not None] == [1, 2]
        os.fsync(fd)
        # The kernel may keep pages it was told to drop (those another CPU added lately):
        # tell it again until it has dropped them.
        for _ in range(50):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            try:
                record_reads.read_records(fd, version, offsets, cached_only=True)
            except BlockingIOError:
                break
            time.sleep(0.01)
        else:
            pytest.skip("this file system keeps the file in memory whatever it is told")
        cold = record_reads.read_records(fd, version, offsets)
        assert [record.id for record in cold if record is not None] == [1, 2]
    finally:
        os.close(fd)
