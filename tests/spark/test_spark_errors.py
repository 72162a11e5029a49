"""Bad input to format("kanin") fails with an error that names what to fix: options and
the sink's columns when Spark plans the query (before any connection), queues, exchanges
and credentials when the broker is first asked."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession
from spark_helpers import channel, error_text, publish

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

NOWHERE = "amqp://guest:secret@127.0.0.1:1/%2F"  # nothing listens: planning must not connect


def test_bad_read_options_fail_at_load_naming_the_option(spark: SparkSession) -> None:
    def load(streaming: bool, **options: str) -> Any:
        reader = spark.readStream if streaming else spark.read
        reader = reader.format("kanin").option("uri", NOWHERE).option("queue", "q")
        for key, value in options.items():
            reader = reader.option(key, value)
        return lambda: reader.load()

    assert "unknown option 'bogus'" in error_text(load(False, bogus="1"))
    assert "'startingOffsets'" in error_text(load(True, startingOffsets="earliest"))
    assert "'maxRecordsPerBatch'" in error_text(load(True, maxRecordsPerBatch="-5"))
    assert "'idColumn' is not used for reading" in error_text(load(False, idColumn="k"))
    no_queue = spark.read.format("kanin").option("uri", NOWHERE)
    assert "option 'queue' is required for reading" in error_text(no_queue.load)
    assert "secret" not in error_text(load(False, uri="http://guest:secret@host/"))


def test_a_write_without_a_body_column_fails_when_planned(spark: SparkSession) -> None:
    writer = (
        spark.range(3)
        .write.format("kanin")
        .option("uri", NOWHERE)
        .option("queue", "q")
        .mode("append")
    )
    said = error_text(writer.save)
    assert "a column named 'body'" in said and "columns: id" in said
    assert "cannot connect" not in said


def test_a_write_must_append_and_have_a_target(spark: SparkSession) -> None:
    frame = spark.range(3).selectExpr("CAST(id AS STRING) AS body")
    to_queue = frame.write.format("kanin").option("uri", NOWHERE).option("queue", "q")
    assert "only appends" in error_text(to_queue.mode("overwrite").save)
    nowhere = frame.write.format("kanin").option("uri", NOWHERE).mode("append")
    assert "writing needs option 'exchange'" in error_text(nowhere.save)
    typed = spark.range(3).selectExpr("id AS body").write.format("kanin")
    bad_type = typed.option("uri", NOWHERE).option("queue", "q").mode("append")
    assert "column 'body' must be binary or string, not bigint" in error_text(bad_type.save)


@pytest.mark.kanin_only
def test_a_missing_queue_wrong_credentials_and_a_classic_queue_are_named(
    spark: SparkSession, broker: Any, unique: Any
) -> None:
    def batch_read(uri: str, queue: str) -> Any:
        frame = spark.read.format("kanin").option("uri", uri).option("queue", queue).load()
        return frame.collect

    missing = unique("missing")
    assert f"no queue '{missing}' (option 'queue')" in error_text(batch_read(broker.url, missing))

    wrong = broker.url.replace("guest:guest@", "guest:wrongpass@")
    said = error_text(batch_read(wrong, missing))
    assert "refused user 'guest'" in said and "option 'uri'" in said
    assert "wrongpass" not in said

    classic = unique("classic")
    with channel(broker.url) as ch:
        ch.queue_declare(classic)
    publish(broker.url, classic, 1)
    assert f"queue '{classic}' (option 'queue') is not a stream" in error_text(
        batch_read(broker.url, classic)
    )

    query = (
        spark.readStream.format("kanin")
        .option("uri", broker.url)
        .option("queue", missing)
        .load()
        .writeStream.format("memory")
        .queryName(unique("m").replace(".", "_"))
        .start()
    )
    assert f"no queue '{missing}'" in error_text(lambda: query.awaitTermination(120))


@pytest.mark.kanin_only
def test_a_missing_exchange_or_an_unroutable_message_fails_the_write(
    spark: SparkSession, broker: Any, unique: Any
) -> None:
    frame = spark.range(0, 10, 1, 1).selectExpr("CAST(id AS STRING) AS body")
    missing = unique("nox")
    writer = frame.write.format("kanin").option("uri", broker.url).mode("append")
    said = error_text(writer.option("exchange", missing).save)
    assert f"no exchange '{missing}' (option 'exchange')" in said

    unbound = unique("unbound")
    with channel(broker.url) as ch:
        ch.exchange_declare(unbound, "direct")
    said = error_text(writer.option("exchange", unbound).option("routingKey", "k").save)
    assert "(routing key 'k') was returned as unroutable" in said
