"""df.write / writeStream .format("kanin"): every row confirmed when the write returns, with
ids that let a deduplicating exchange drop what Spark's retries and replays send again."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import BinaryType
from spark_helpers import channel, declare_stream, drain, message_count, publish, read_stream

pytestmark = [pytest.mark.spark, pytest.mark.kanin_only, pytest.mark.timeout(240)]


def declare_queue(url: str, name: str) -> str:
    with channel(url) as ch:
        ch.queue_declare(name, durable=True)
    return name


def dedup_exchange_into(url: str, exchange: str, queue: str) -> None:
    with channel(url) as ch:
        ch.exchange_declare(
            exchange, "x-message-deduplication", durable=True, arguments={"x-cache-size": 100_000}
        )
        ch.queue_declare(queue, durable=True)
        ch.queue_bind(queue, exchange)


def test_a_batch_write_returns_with_every_row_confirmed_under_positional_ids(
    spark: SparkSession, broker: Any, unique: Any
) -> None:
    queue = declare_queue(broker.url, unique("out"))
    frame = spark.range(0, 3000, 1, 2).selectExpr("CAST(id AS STRING) AS body")

    frame.write.format("kanin").option("uri", broker.url).option("queue", queue).mode(
        "append"
    ).save()

    assert message_count(broker.url, queue) == 3000  # confirmed, so already there
    got = drain(broker.url, queue)
    assert sorted(int(body) for _props, body in got) == list(range(3000))
    ids = [props.message_id for props, _body in got]
    assert len(set(ids)) == 3000
    assert all(re.fullmatch(r"j[0-9a-f]{32}:p[01]:r\d+", mid) for mid in ids)
    assert all(props.headers["x-deduplication-header"] == props.message_id for props, _ in got)
    assert all(props.delivery_mode == 2 for props, _ in got)


def test_id_column_and_the_optional_columns_shape_each_message(
    spark: SparkSession, broker: Any, unique: Any
) -> None:
    exchange = unique("ex")
    with channel(broker.url) as ch:
        ch.exchange_declare(exchange, "direct")
        for key in ("a", "b"):
            ch.queue_declare(f"{exchange}.{key}")
            ch.queue_bind(f"{exchange}.{key}", exchange, key)
    frame = spark.createDataFrame(
        [
            (7, b"seven", "a", {"region": "eu"}, "mid-7", "c-7", "ignored"),
            (8, b"eight", None, None, None, None, "ignored"),
        ],
        "key int, body binary, routing_key string, headers map<string,string>, "
        "message_id string, correlation_id string, other string",
    )

    (
        frame.write.format("kanin")
        .option("uri", broker.url)
        .option("exchange", exchange)
        .option("routingKey", "b")  # for rows without their own routing_key
        .option("idColumn", "key")
        .mode("append")
        .save()
    )

    [(to_a, body_a)] = drain(broker.url, f"{exchange}.a")
    [(to_b, body_b)] = drain(broker.url, f"{exchange}.b")
    assert (body_a, to_a.message_id, to_a.correlation_id) == (b"seven", "mid-7", "c-7")
    assert to_a.headers == {"region": "eu", "x-deduplication-header": "7"}
    assert (body_b, to_b.message_id, to_b.correlation_id) == (b"eight", "8", None)
    assert to_b.headers == {"x-deduplication-header": "8"}


def test_a_streaming_write_publishes_each_batch_once_even_when_a_restart_replays_it(
    spark: SparkSession, broker: Any, unique: Any, tmp_path: Path
) -> None:
    source = declare_stream(broker.url, unique("st"))
    publish(broker.url, source, 1500)
    exchange, target = unique("dedup"), unique("target")
    dedup_exchange_into(broker.url, exchange, target)
    frame = read_stream(spark, broker.url, source, maxRecordsPerBatch=1000)

    def run() -> Any:
        query = (
            frame.select("body")
            .writeStream.format("kanin")
            .option("uri", broker.url)
            .option("exchange", exchange)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180)
        assert query.exception() is None
        return query

    first = run()
    assert message_count(broker.url, target) == 1500
    # As if the driver died before committing the last batch: Spark publishes it again.
    (tmp_path / "checkpoint" / "commits" / "1").unlink()
    (tmp_path / "checkpoint" / "commits" / ".1.crc").unlink(missing_ok=True)
    replay = run()

    assert [p["numInputRows"] for p in replay.recentProgress if p["numInputRows"]] == [500]
    got = drain(broker.url, target)
    assert sorted(body for _props, body in got) == sorted(b"m%d" % n for n in range(1500))
    batches = {re.fullmatch(r"q(.+):b(\d+):p\d+:r\d+", p.message_id).groups() for p, _ in got}
    assert batches == {(first.id, "0"), (first.id, "1")}


@contextmanager
def arrow_batches_of(spark: SparkSession, rows: int) -> Iterator[None]:
    """The sink's Python worker gets its input as Arrow batches; small ones let it publish
    while the rows after them are still being computed."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
        spark.conf.set(key, before)


FAIL_AT_ROW = 1800


def failing_once_after_publishing(url: str, queue: str, record: Path) -> Any:
    """A body column whose first task attempt, at row FAIL_AT_ROW, waits until the sink has
    really published a window of earlier rows (the queue holds at least 1000), notes how
    many were there, and fails. A failure without that wait could come before anything
    left the sink's worker, and prove nothing."""

    @udf(returnType=BinaryType())
    def body(n):  # type: ignore[no-untyped-def]  # hints would make pyspark guess a pandas UDF
        task = TaskContext.get()
        if n == FAIL_AT_ROW and task is not None and task.attemptNumber() == 0:
            import time

            deadline = time.monotonic() + 60
            while message_count(url, queue) < 1000 and time.monotonic() < deadline:
                time.sleep(0.05)
            record.write_text(str(message_count(url, queue)))
            raise RuntimeError("injected failure after the sink published part of the task")
        return str(n).encode().ljust(1000, b".")

    return body


def test_a_retried_task_publishes_nothing_twice_behind_a_deduplicating_exchange(
    spark: SparkSession, broker: Any, unique: Any, tmp_path: Path
) -> None:
    exchange, queue = unique("dedup"), unique("sink")
    dedup_exchange_into(broker.url, exchange, queue)
    record = tmp_path / "published-before-failure"
    body = failing_once_after_publishing(broker.url, queue, record)
    frame = spark.range(0, 2000, 1, 1).select(body("id").alias("body"))  # one task

    with arrow_batches_of(spark, 50):
        frame.write.format("kanin").option("uri", broker.url).option("exchange", exchange).mode(
            "append"
        ).save()

    published_by_failed_attempt = int(record.read_text())
    assert published_by_failed_attempt >= 1000
    got = drain(broker.url, queue)
    assert len(got) == 2000
    assert len({props.message_id for props, _ in got}) == 2000
    assert sorted(int(body.rstrip(b".")) for _, body in got) == list(range(2000))
