"""Structured Streaming reads of a kanin stream, on real local Spark against a real broker.

Each micro-batch is a range of stream offsets that Spark writes to its checkpoint before
running it, so the Parquet output must hold every message exactly once: across batches
capped by maxRecordsPerBatch, across a restart, and across a batch Spark runs again
because the crash it recovers from came before the batch was committed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from spark_helpers import declare_stream, publish, read_stream

pytestmark = [pytest.mark.spark, pytest.mark.kanin_only, pytest.mark.timeout(240)]


def to_parquet(frame: Any, folder: Path, **trigger: Any) -> StreamingQuery:
    return (
        frame.writeStream.format("parquet")
        .option("path", str(folder / "out"))
        .option("checkpointLocation", str(folder / "checkpoint"))
        .trigger(**trigger)
        .start()
    )


def written_offsets(spark: SparkSession, folder: Path) -> list[int]:
    """The offsets in the sink's committed files (read through its log, so files of a batch
    that never committed are not counted), sorted; duplicates would show twice."""
    rows = spark.read.parquet(str(folder / "out")).select("offset").collect()
    return sorted(row.offset for row in rows)


def batch_sizes(query: StreamingQuery) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_available_now_reads_every_message_in_batches_of_max_records(
    spark: SparkSession, broker: Any, unique: Any, tmp_path: Path
) -> None:
    queue = declare_stream(broker.url, unique("st"))
    publish(broker.url, queue, 2500)
    frame = read_stream(spark, broker.url, queue, maxRecordsPerBatch=1000, numPartitions=2)

    query = to_parquet(frame, tmp_path, availableNow=True)
    assert query.awaitTermination(180)

    assert query.exception() is None
    assert batch_sizes(query) == [1000, 1000, 500]
    assert written_offsets(spark, tmp_path) == list(range(2500))
    row = spark.read.parquet(str(tmp_path / "out")).where("offset = 1234").collect()[0]
    assert (row.body, row.message_id, row.headers["n"]) == (b"m1234", "id-1234", "1234")
    assert (row.routing_key, row.exchange, row.redelivered) == (queue, "", False)


def test_a_restarted_query_goes_on_from_its_checkpoint_and_a_replayed_batch_is_exact(
    spark: SparkSession, broker: Any, unique: Any, tmp_path: Path
) -> None:
    queue = declare_stream(broker.url, unique("st"))
    publish(broker.url, queue, 1200)
    frame = read_stream(spark, broker.url, queue, maxRecordsPerBatch=500)

    running = to_parquet(frame, tmp_path, processingTime="200 milliseconds")
    running.processAllAvailable()
    publish(broker.url, queue, 300, start=1200)  # while it runs
    running.processAllAvailable()
    running.stop()
    first_run = batch_sizes(running)
    assert sum(first_run) == 1500
    assert written_offsets(spark, tmp_path) == list(range(1500))

    # As if the driver died after the last batch's offsets were logged and before the
    # batch was committed: Spark must run it again, and it must read the same range.
    last = forget_last_batch(tmp_path)
    publish(broker.url, queue, 700, start=1500)
    restarted = to_parquet(frame, tmp_path, availableNow=True)
    assert restarted.awaitTermination(180)

    assert restarted.exception() is None
    assert last >= 2
    assert batch_sizes(restarted)[0] == first_run[-1]  # the replay: the same range again
    assert written_offsets(spark, tmp_path) == list(range(2200))


def forget_last_batch(folder: Path) -> int:
    """Delete the newest batch's commit-log entry and the file sink's log entry for it; the
    batch's offsets stay logged. Returns its batch id."""
    commits = folder / "checkpoint" / "commits"
    last = max(int(entry.name) for entry in commits.iterdir() if entry.name.isdigit())
    for log in (commits, folder / "out" / "_spark_metadata"):
        (log / str(last)).unlink()
        (log / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the entry
    return last


def test_starting_at_last_reads_only_what_comes_after_the_query_starts(
    spark: SparkSession, broker: Any, unique: Any
) -> None:
    queue = declare_stream(broker.url, unique("st"))
    publish(broker.url, queue, 100)
    name = unique("mem").replace(".", "_")
    frame = read_stream(spark, broker.url, queue, startingOffsets="last")
    query = frame.writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        assert spark.table(name).count() == 0
        publish(broker.url, queue, 50, start=100)
        query.processAllAvailable()
        rows = spark.table(name).select("offset", "body").collect()
    finally:
        query.stop()
    assert sorted(row.offset for row in rows) == list(range(100, 150))
    assert {row.body for row in rows} == {b"m%d" % n for n in range(100, 150)}
