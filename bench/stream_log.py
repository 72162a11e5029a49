"""The stream log alone (kanin/store/stream_log.py), no broker, no sockets.

    python bench/stream_log.py                     # 1,000,000 records of 100 bytes
    python bench/stream_log.py --records 10000000 --body 16

Measured, in one process on one asyncio loop, in a fresh temporary directory:
(1) append: records appended and committed in rounds of --round (one after_commit each,
    waited for before the next round, as a publisher with that confirm window would);
(2) recovery: a new StreamLog on the same directory, recover(): seconds, and the growth
    of the process's resident memory it leaves (the sparse index, no bodies);
(3) read from offset 0: every record read back with read_later in batches of --batch,
    the next batch asked for when the last arrives (a consumer far behind): records/s;
(4) tail reads: with the log recovered, one more round appended and read back from its
    first offset, answered from the tail cache on the loop: microseconds per read_later.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kanin.store.stream_log import StreamLog, StreamRecord


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def commit(log: StreamLog) -> bool:
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    log.after_commit(done.set_result)
    return await done


async def read_later(log: StreamLog, start: int, batch: int) -> list[StreamRecord]:
    done: asyncio.Future[list[StreamRecord]] = asyncio.get_running_loop().create_future()
    log.read_later(start, batch, 1 << 30, done.set_result)
    return await done


async def run(args: argparse.Namespace, directory: Path) -> None:
    loop = asyncio.get_running_loop()
    body = b"b" * args.body
    header = b"\x00\x10\x02"
    log = StreamLog(directory, loop, max_segment_bytes=args.segment)
    log.recover()
    started = time.perf_counter()
    ts = 1_700_000_000_000
    for first in range(0, args.records, args.round):
        for _ in range(min(args.round, args.records - first)):
            log.append("amq.default", "stream", header, body, ts)
        ts += 1
        assert await commit(log)
    elapsed = time.perf_counter() - started
    size = log.size_bytes()
    print(
        f"append+commit: {args.records:,} records in {elapsed:.1f} s = "
        f"{args.records / elapsed:,.0f}/s, {size / 2**20:,.0f} MiB on disk"
    )
    await log.close()
    del log

    before = rss_mib()
    started = time.perf_counter()
    log = StreamLog(directory, loop, max_segment_bytes=args.segment)
    log.recover()
    elapsed = time.perf_counter() - started
    segments = len(log._index.segments)
    print(
        f"recovery: {elapsed:.2f} s ({args.records / elapsed:,.0f} records/s), "
        f"{segments} segments, resident memory {before:.0f} -> {rss_mib():.0f} MiB "
        f"(peak so far {peak_mib():.0f} MiB: recovery reads a whole segment at once)"
    )

    started = time.perf_counter()
    start, count = 0, 0
    while True:
        batch = await read_later(log, start, args.batch)
        if not batch:
            break
        count += len(batch)
        start = batch[-1].offset + 1
    elapsed = time.perf_counter() - started
    assert count == args.records, count
    print(f"read from 0 in batches of {args.batch}: {elapsed:.1f} s = {count / elapsed:,.0f}/s")

    first = log.next_offset
    for _ in range(args.round):
        log.append("amq.default", "stream", header, body, ts)
    assert await commit(log)
    started = time.perf_counter()
    reads = 2000
    for _ in range(reads):
        got = await read_later(log, first, args.batch)
        assert got and got[0].offset == first
    elapsed = time.perf_counter() - started
    print(
        f"tail read_later (from the cache): {elapsed / reads * 1e6:.0f} us each, "
        f"round trip through the loop included"
    )
    await log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--round", type=int, default=1000, help="records per commit")
    parser.add_argument("--batch", type=int, default=1000, help="records per read")
    parser.add_argument("--segment", type=int, default=500_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="where (a temporary dir)")
    args = parser.parse_args()
    parent = Path(tempfile.mkdtemp(prefix="stream-bench-", dir=args.dir))
    try:
        asyncio.run(run(args, parent / "stream"))
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
