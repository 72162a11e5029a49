"""Reading a kanin stream from Spark: a micro-batch stream reader and a batch reader.

Where each part runs (PySpark's Python data source API): the stream reader's offset
calls (initialOffset, latestOffset, partitions, commit, stop) run in one long-lived
Python process beside the driver, which keeps a connection for finding the stream's
tail; read(partition) runs in executors' Python workers, on copies of the reader that
Spark pickled before any connection was made, each opening its own connection for its
range. The batch reader finds its range once, when Spark plans the read.

Offsets are stream offsets, {"next": N}, so a micro-batch is a fixed range of the log:
Spark writes [start, end) to its checkpoint before running the batch, and a batch run
again after a failure reads exactly the same messages. Into a sink that writes each
batch once (the file sink, foreachBatch keyed on the batch id, Delta) that is
exactly-once. Nothing is acked for retention: a stream keeps its messages for every
reader, so commit() has nothing to do.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from aio_pika.abc import AbstractConnection
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kanin.spark import loop
from kanin.spark.arrow import record_batches
from kanin.spark.client import close_quietly, connect
from kanin.spark.extent import ExtentProbe, extent_probe
from kanin.spark.offsets import (
    OffsetRange,
    StreamExtent,
    batch_end,
    next_of,
    offset_dict,
    resolve,
    split_range,
)
from kanin.spark.options import KaninOptions
from kanin.spark.stream_read import read_range
from kanin.spark.tail_scan import TailScanProbe

PROBE_TIMEOUT_S = 60.0


def _read_partition(options: KaninOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A range's rows, as Arrow record batches: PySpark takes those as they are."""
    assert isinstance(partition, StreamRange)
    return record_batches(read_range(options, OffsetRange(partition.start, partition.end)))


class StreamRange(InputPartition):
    """One range of offsets, read by one task."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


class _Probe:
    """A connection kept for asking where the stream starts and ends. Made on first use
    (never in a constructor: readers are pickled), made again if the broker dropped it."""

    def __init__(self, options: KaninOptions) -> None:
        self.options = options
        self._connection: AbstractConnection | None = None
        self._extent_probe: ExtentProbe | TailScanProbe | None = None

    def extent(self) -> StreamExtent | None:
        return loop.run(self._extent(), PROBE_TIMEOUT_S)

    async def _extent(self) -> StreamExtent | None:
        if self._connection is None or self._connection.is_closed or not self._extent_probe:
            await close_quietly(self._connection)
            self._connection = await connect(self.options, "stream offsets")
            self._extent_probe = extent_probe(self._connection, self.options)
        return await self._extent_probe.extent()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        self._extent_probe = None
        if connection is not None:
            loop.run(close_quietly(connection), PROBE_TIMEOUT_S)


class _ProbingReader:
    """What both readers share: the options, a probe made when first needed, and pickling
    without it."""

    def __init__(self, options: KaninOptions) -> None:
        self.options = options
        self._probe: _Probe | None = None

    def _extent(self) -> StreamExtent | None:
        if self._probe is None:
            self._probe = _Probe(self.options)
        return self._probe.extent()

    def _close_probe(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_probe": None}

    def _ranges(self, whole: OffsetRange) -> list[StreamRange]:
        pieces = split_range(whole, self.options.num_partitions)
        return [StreamRange(piece.start, piece.end) for piece in pieces]


class KaninStreamReader(_ProbingReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: KaninOptions) -> None:
        super().__init__(options)
        # Set by prepareForTriggerAvailableNow: the tail when the run started, so a run
        # ends even while publishers go on appending.
        self._stop_at: int | None = None

    def initialOffset(self) -> dict[str, int]:
        return offset_dict(resolve(self.options.starting_offsets, self._extent()))

    def getDefaultReadLimit(self) -> ReadLimit:
        most = self.options.max_records_per_batch
        return ReadAllAvailable() if most is None else ReadMaxRows(most)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        most = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return offset_dict(batch_end(next_of(start), self._extent(), most, self._stop_at))

    def prepareForTriggerAvailableNow(self) -> None:
        extent = self._extent()
        self._stop_at = extent.tail if extent is not None else 0

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[StreamRange]:
        return self._ranges(OffsetRange(next_of(start), next_of(end)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: a stream keeps its messages whatever readers do."""

    def stop(self) -> None:
        self._close_probe()


class KaninBatchReader(_ProbingReader, DataSourceReader):
    """spark.read of a stream from startingOffsets (default first) to endingOffsets
    (default last: the tail when Spark plans the read; a number past the tail reads to
    the tail)."""

    def partitions(self) -> Sequence[StreamRange]:
        try:
            extent = self._extent()
        finally:
            self._close_probe()
        start = resolve(self.options.starting_offsets, extent)
        tail = resolve("last", extent)
        end = min(resolve(self.options.ending_offsets, extent), tail)
        if extent is not None:
            start = max(start, extent.first)
        ranges = self._ranges(OffsetRange(start, end))
        return ranges or [StreamRange(start, start)]  # Spark wants at least one

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, partition)
