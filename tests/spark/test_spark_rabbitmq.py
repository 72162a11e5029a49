"""kanin.spark against RabbitMQ 3.10 on 127.0.0.1:5672 (guest/guest), where RabbitMQ has
the feature: streams read by offsets (the tail found by scanning, tail_scan.py), classic
queues read in queue mode, and the sink. Skipped when no RabbitMQ answers there: kanin's
own suite never needs one. Every queue and exchange made here has a name of its own and
is deleted at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pyspark.sql import SparkSession
from spark_helpers import (
    channel,
    declare_stream,
    drain,
    error_text,
    message_count,
    publish,
    read_stream,
    wait_until,
)

pytestmark = [pytest.mark.spark, pytest.mark.rabbitmq, pytest.mark.timeout(300)]

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


class Rabbit:
    """The RabbitMQ to test against, and the names to delete from it afterwards."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def stream(self, name: str) -> str:
        self.queues.append(name)
        return declare_stream(self.url, name)

    def queue(self, name: str) -> str:
        self.queues.append(name)
        with channel(self.url) as ch:
            ch.queue_declare(name, durable=True)
        return name

    def clean_up(self) -> None:
        with channel(self.url) as ch:
            for queue in self.queues:
                ch.queue_delete(queue)
            for exchange in self.exchanges:
                ch.exchange_delete(exchange)


def rabbitmq_version(url: str) -> str | None:
    """RabbitMQ's version if RabbitMQ (not kanin, not nothing) answers at `url`."""
    try:
        connection = pika.BlockingConnection(
            pika.URLParameters(url + "?connection_attempts=1&socket_timeout=2")
        )
    except pika.exceptions.AMQPError:
        return None
    try:
        properties = connection._impl.server_properties
    finally:
        connection.close()
    if "kanin_version" in properties or properties.get("product") != "RabbitMQ":
        return None
    return str(properties.get("version"))


@pytest.fixture
def rabbit() -> Iterator[Rabbit]:
    if rabbitmq_version(RABBITMQ_URL) is None:
        pytest.skip("no RabbitMQ answers on 127.0.0.1:5672 (guest/guest)")
    found = Rabbit(RABBITMQ_URL)
    try:
        yield found
    finally:
        found.clean_up()


def test_stream_mode_reads_every_offset_once_across_a_restart(
    spark: SparkSession, rabbit: Rabbit, unique: Any, tmp_path: Path
) -> None:
    stream = rabbit.stream(unique("st"))
    publish(rabbit.url, stream, 3000)
    frame = read_stream(spark, rabbit.url, stream, maxRecordsPerBatch=1000, numPartitions=2)

    def run() -> list[int]:
        query = (
            frame.writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(240)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    first = run()
    assert max(first) <= 1000 and sum(first) == 3000  # the scan found the whole tail
    publish(rabbit.url, stream, 700, start=3000)
    assert sum(run()) == 700  # on from the checkpoint, nothing twice

    rows = spark.read.parquet(str(tmp_path / "out")).select("offset", "body").collect()
    assert sorted(row.offset for row in rows) == list(range(3700))
    assert all(row.body == b"m%d" % row.offset for row in rows)


def test_a_batch_read_between_offsets_drops_the_rest_of_rabbitmq_s_chunk(
    spark: SparkSession, rabbit: Rabbit, unique: Any
) -> None:
    # One chunk holds many messages; a consumer from 1000 starts at the chunk's start.
    stream = rabbit.stream(unique("st"))
    publish(rabbit.url, stream, 2000)
    between = (
        spark.read.format("kanin")
        .option("uri", rabbit.url)
        .option("queue", stream)
        .option("startingOffsets", "1000")
        .option("endingOffsets", "1500")
        .load()
    )
    assert sorted(row.offset for row in between.select("offset").collect()) == list(
        range(1000, 1500)
    )
    everything = spark.read.format("kanin").option("uri", rabbit.url).option("queue", stream)
    assert everything.load().count() == 2000


def test_a_classic_queue_is_named_as_not_a_stream(
    spark: SparkSession, rabbit: Rabbit, unique: Any
) -> None:
    queue = rabbit.queue(unique("classic"))
    publish(rabbit.url, queue, 3)
    frame = spark.read.format("kanin").option("uri", rabbit.url).option("queue", queue).load()
    assert f"queue '{queue}' (option 'queue') is not a stream" in error_text(frame.collect)
    assert message_count(rabbit.url, queue) == 3  # nothing taken


def test_queue_mode_reads_a_classic_queue_and_acks_it(
    spark: SparkSession, rabbit: Rabbit, unique: Any, tmp_path: Path
) -> None:
    queue = rabbit.queue(unique("jobs"))
    publish(rabbit.url, queue, 2500)
    frame = read_stream(spark, rabbit.url, queue, mode="queue", maxRecordsPerBatch=1000)
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "out")).select("message_id").collect()
    assert sorted(int(row.message_id[3:]) for row in rows) == list(range(2500))
    wait_until(lambda: message_count(rabbit.url, queue) == 0, 10, "an empty queue")


def test_the_sink_publishes_every_row_confirmed_and_fails_on_a_return(
    spark: SparkSession, rabbit: Rabbit, unique: Any
) -> None:
    queue = rabbit.queue(unique("out"))
    frame = spark.range(0, 3000, 1, 2).selectExpr("CAST(id AS STRING) AS body")
    frame.write.format("kanin").option("uri", rabbit.url).option("queue", queue).mode(
        "append"
    ).save()
    assert message_count(rabbit.url, queue) == 3000  # confirmed, so already there
    got = drain(rabbit.url, queue)
    assert sorted(int(body) for _props, body in got) == list(range(3000))
    assert len({props.headers["x-deduplication-header"] for props, _ in got}) == 3000

    unbound = unique("unbound")
    rabbit.exchanges.append(unbound)
    with channel(rabbit.url) as ch:
        ch.exchange_declare(unbound, "direct")
    writer = frame.write.format("kanin").option("uri", rabbit.url).mode("append")
    said = error_text(writer.option("exchange", unbound).option("routingKey", "k").save)
    assert "(routing key 'k') was returned as unroutable: 312 NO_ROUTE" in said


def test_rabbitmq_without_the_plugin_has_no_deduplicating_exchange(
    rabbit: Rabbit, unique: Any
) -> None:
    """So behind RabbitMQ 3.10 as it comes the sink is at-least-once: deduplication needs
    kanin (or RabbitMQ with a deduplication plugin)."""
    connection = pika.BlockingConnection(pika.URLParameters(rabbit.url))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as refused:
        connection.channel().exchange_declare(unique("dedup"), "x-message-deduplication")
    assert connection.is_closed
    assert refused.value.reply_code == 503
    assert "unknown exchange type 'x-message-deduplication'" in refused.value.reply_text
