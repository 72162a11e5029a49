"""What the Spark tests share: publishing to streams and queues with pika, reading queues
back, reading a Parquet sink, and the text of an error Spark raised."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STREAM = {"x-queue-type": "stream"}


@contextmanager
def channel(url: str) -> Iterator[BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        yield connection.channel()
    finally:
        connection.close()


def declare_stream(url: str, name: str) -> str:
    with channel(url) as ch:
        ch.queue_declare(name, durable=True, arguments=STREAM)
    return name


def publish(url: str, queue: str, count: int, start: int = 0) -> None:
    """Messages m<n> for n in [start, start + count), each with message id id-<n> and header
    n, all in the queue when this returns. Only the last is published in confirm mode: a
    channel's messages are enqueued in order, so once it is confirmed all are (and the
    tests stay quick, without a round trip per message)."""
    with channel(url) as ch:
        for n in range(start, start + count):
            if n == start + count - 1:
                ch.confirm_delivery()
            props = pika.BasicProperties(message_id=f"id-{n}", headers={"n": n})
            ch.basic_publish("", queue, b"m%d" % n, props)


def message_count(url: str, queue: str) -> int:
    with channel(url) as ch:
        return int(ch.queue_declare(queue, passive=True).method.message_count)


def consumer_count(url: str, queue: str) -> int:
    with channel(url) as ch:
        return int(ch.queue_declare(queue, passive=True).method.consumer_count)


def drain(url: str, queue: str) -> list[tuple[pika.BasicProperties, bytes]]:
    """Every message in a (classic) queue, taken with basic.get and acked."""
    got = []
    with channel(url) as ch:
        while True:
            method, props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            got.append((props, body))


def read_stream(spark: SparkSession, url: str, queue: str, **options: Any) -> DataFrame:
    reader = spark.readStream.format("kanin").option("uri", url).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def error_text(action: Callable[[], object]) -> str:
    """What Spark says when `action` fails (the Python traceback is in the message)."""
    try:
        action()
    except Exception as error:  # Spark wraps Python errors in several exception types
        return str(error)
    raise AssertionError("expected the Spark action to fail")


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
