"""spark.read.format("kanin"): a stream between two offsets, as a batch, split into partitions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pika
import pytest
from pyspark.sql import SparkSession
from spark_helpers import channel, declare_stream, publish

pytestmark = [pytest.mark.spark, pytest.mark.kanin_only, pytest.mark.timeout(240)]


def test_a_batch_read_gets_exactly_the_offsets_asked_for_in_partitions(
    spark: SparkSession, broker: Any, unique: Any
) -> None:
    queue = declare_stream(broker.url, unique("st"))
    publish(broker.url, queue, 2000)

    between = (
        spark.read.format("kanin")
        .option("uri", broker.url)
        .option("queue", queue)
        .option("startingOffsets", "300")
        .option("endingOffsets", "1700")
        .option("numPartitions", "2")
        .load()
    )
    assert between.rdd.getNumPartitions() == 2
    rows = between.select("offset", "body", "message_id").collect()
    assert sorted(row.offset for row in rows) == list(range(300, 1700))
    assert all(row.body == b"m%d" % row.offset for row in rows)
    assert all(row.message_id == f"id-{row.offset}" for row in rows)

    everything = spark.read.format("kanin").option("uri", broker.url).option("queue", queue)
    assert everything.load().count() == 2000  # first to the tail when planned
    beyond = everything.option("startingOffsets", "1990").option("endingOffsets", "5000")
    assert sorted(row.offset for row in beyond.load().collect()) == list(range(1990, 2000))


def test_a_row_carries_the_message_s_properties(
    spark: SparkSession, broker: Any, unique: Any
) -> None:
    queue = declare_stream(broker.url, unique("st"))
    sent_at = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    with channel(broker.url) as ch:
        ch.confirm_delivery()
        props = pika.BasicProperties(
            message_id="order-1",
            correlation_id="corr-9",
            timestamp=int(sent_at.timestamp()),
            headers={"region": "eu", "attempt": 3, "raw": b"bytes", "nested": {"k": [1, 2]}},
        )
        ch.basic_publish("", queue, b"\x00payload", props)

    frame = spark.read.format("kanin").option("uri", broker.url).option("queue", queue).load()
    row = frame.selectExpr("*", "unix_timestamp(timestamp) AS epoch").collect()[0]

    assert row.body == b"\x00payload"
    assert (row.message_id, row.correlation_id) == ("order-1", "corr-9")
    assert (row.routing_key, row.exchange, row.redelivered, row.offset) == (queue, "", False, 0)
    assert row.epoch == int(sent_at.timestamp())
    assert row.headers == {
        "region": "eu",
        "attempt": "3",
        "raw": "bytes",
        "nested": '{"k":[1,2]}',
        "x-stream-offset": "0",
    }
