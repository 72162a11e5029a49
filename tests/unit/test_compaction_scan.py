"""Compaction's scan on the loop (kanin/store/compaction.py): it finds exactly the live
ENQUEUE records, a bounded slice per loop turn, and reports a scan that fails."""

from __future__ import annotations

import asyncio

from kanin.store import compaction, records


def segment_bytes(count: int) -> tuple[bytes, list[int]]:
    """A segment of `count` ENQUEUE records (ids 1..count); returns it and their offsets."""
    data, offsets = bytearray(records.FILE_HEADER), []
    for id_ in range(1, count + 1):
        offsets.append(len(data))
        data += records.encode_enqueue(id_, "q", "", "k", b"\x00" * 14, b"body %d" % id_)
    return bytes(data), offsets


async def test_live_records_are_found_a_slice_per_turn() -> None:
    count = 2 * compaction.SCAN_SLICE + 10
    data, offsets = segment_bytes(count)
    live_ids = {1, 7, compaction.SCAN_SLICE + 3, count}
    where = {id_: offsets[id_ - 1] for id_ in live_ids}
    where[8] = -1  # live, but elsewhere (moved): not this segment's

    def live(message_id: int, offset: int) -> bool:
        return where.get(message_id) == offset

    loop = asyncio.get_running_loop()
    result: asyncio.Future[tuple[list[records.Record], BaseException | None]] = loop.create_future()
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while not result.done():
            turns += 1
            await asyncio.sleep(0)

    counting = asyncio.ensure_future(count_turns())
    scan = compaction.live_enqueues(data, None, live)
    compaction.LiveScan(loop, scan, lambda found, error: result.set_result((found, error))).start()
    found, error = await result
    await counting
    assert error is None
    assert sorted(record.id for record in found) == sorted(live_ids)
    assert all(record.body == b"body %d" % record.id for record in found)
    assert turns >= 3  # the scan gave the loop back between slices


async def test_a_scan_that_raises_reports_the_error() -> None:
    def broken() -> object:
        yield None
        raise ValueError("undecodable")

    loop = asyncio.get_running_loop()
    result: asyncio.Future[tuple[list[records.Record], BaseException | None]] = loop.create_future()
    compaction.LiveScan(
        loop,
        broken(),
        lambda found, error: result.set_result((found, error)),  # type: ignore[arg-type]
    ).start()
    found, error = await result
    assert found == [] and isinstance(error, ValueError)
