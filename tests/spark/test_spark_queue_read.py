"""Queue mode on real Spark: a classic queue read as micro-batches into Parquet, each
message acked only once Spark has committed the batch holding it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from spark_helpers import (
    channel,
    consumer_count,
    message_count,
    publish,
    read_stream,
    wait_until,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def test_queue_mode_reads_every_message_once_and_leaves_the_queue_empty(
    spark: SparkSession, broker: Any, unique: Any, tmp_path: Path
) -> None:
    queue = unique("jobs")
    with channel(broker.url) as ch:
        ch.queue_declare(queue, durable=True)
    publish(broker.url, queue, 2500)
    frame = read_stream(spark, broker.url, queue, mode="queue", maxRecordsPerBatch=1000)

    def run(more: int = 0) -> list[int]:
        query = (
            frame.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            query.processAllAvailable()
            if more:
                publish(broker.url, queue, more, start=2500)
                query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    first = run()
    assert max(first) <= 1000 and sum(first) == 2500
    # Spark moved past the last batch after committing it, so it was acked too: a
    # graceful stop leaves nothing to deliver again.
    wait_until(lambda: message_count(broker.url, queue) == 0, 10, "an empty queue")

    assert sum(run(more=300)) == 300  # a restart reads on, nothing twice
    rows = spark.read.parquet(str(tmp_path / "out")).select("message_id", "offset").collect()
    assert sorted(int(row.message_id[3:]) for row in rows) == list(range(2800))
    assert {row.offset for row in rows} == {None}
    wait_until(lambda: message_count(broker.url, queue) == 0, 10, "an empty queue")


def test_queue_mode_with_available_now_reads_what_is_there_and_ends(
    spark: SparkSession, broker: Any, unique: Any, tmp_path: Path
) -> None:
    queue = unique("jobs")
    with channel(broker.url) as ch:
        ch.queue_declare(queue, durable=True)
    publish(broker.url, queue, 2500)
    frame = read_stream(spark, broker.url, queue, mode="queue", maxRecordsPerBatch=1000)

    def run() -> list[int]:
        query = (
            frame.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180)  # it ends by itself
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    sizes = run()
    assert max(sizes) <= 1000 and sum(sizes) == 2500
    # The run closed its consumer before it ended (the source process Spark leaves
    # behind lives on for a moment): what is published now is left for the next run.
    assert consumer_count(broker.url, queue) == 0
    # Spark asked for the batch after the last one before it ended, which acked it.
    assert message_count(broker.url, queue) == 0
    publish(broker.url, queue, 300, start=2500)
    assert sum(run()) == 300
    rows = spark.read.parquet(str(tmp_path / "out")).select("message_id").collect()
    assert sorted(int(row.message_id[3:]) for row in rows) == list(range(2800))
