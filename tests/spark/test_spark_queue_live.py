"""Queue mode's reader without Spark: batches capped, acks only for batches Spark has
committed (or has moved past), and what was not acked coming back redelivered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from spark_helpers import channel, consumer_count, message_count, publish, wait_until

from kanin.spark.options import Role, parse_options
from kanin.spark.queue_read import KaninQueueReader
from kanin.spark.rows import Row

pytestmark = [pytest.mark.spark, pytest.mark.timeout(60)]


def queue_reader(url: str, queue: str, batch: int) -> KaninQueueReader:
    options = {"uri": url, "queue": queue, "mode": "queue", "maxRecordsPerBatch": str(batch)}
    return KaninQueueReader(parse_options(options, Role.READ))


def rows_of(batches: Iterator[Any]) -> list[Row]:
    """A batch's rows, from the Arrow record batches read() hands Spark."""
    return [tuple(row.values()) for batch in batches for row in batch.to_pylist()]


def read_batch(reader: KaninQueueReader, start: int, want: int) -> tuple[list[Row], int]:
    """read(start) once `want` deliveries have come (they arrive asynchronously, and a
    batch takes what has come), checking it hands over exactly those. The reader's
    consumer must have started (initialOffset)."""
    wait_until(lambda: reader.waiting >= want, timeout=10, what=f"{want} deliveries")
    rows, end = reader.read({"next": start})
    taken = rows_of(rows)
    assert (len(taken), end["next"]) == (want, start + want)
    return taken, end["next"]


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_acks_follow_spark_s_commits_and_the_rest_comes_back(
    broker: Any, unique: Any, queue_type: str
) -> None:
    queue = unique(queue_type)
    with channel(broker.url) as ch:
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": queue_type})
    publish(broker.url, queue, 25)

    reader = queue_reader(broker.url, queue, batch=10)
    try:
        assert reader.initialOffset() == {"next": 0}  # starts the consumer
        first, end = read_batch(reader, 0, 10)
        assert [row[4] for row in first] == [f"id-{n}" for n in range(10)]
        assert all(row[7] is False and row[8] is None for row in first)  # redelivered, offset
        second, end = read_batch(reader, end, 10)  # acks the first: Spark moved past it
        assert [row[4] for row in second] == [f"id-{n}" for n in range(10, 20)]
        reader.commit({"next": end})  # acks the second
        third, end = read_batch(reader, end, 5)  # the last, never committed
    finally:
        reader.close()

    wait_until(lambda: message_count(broker.url, queue) == 5, 10, "the unacked batch back")
    again = queue_reader(broker.url, queue, batch=10)
    try:
        again.initialOffset()
        back, _ = read_batch(again, 0, 5)
    finally:
        again.close()
    assert [row[4] for row in back] == [row[4] for row in third]
    assert all(row[7] is True for row in back)


def test_a_replayed_batch_is_empty_and_offsets_count_only_what_was_handed_over(
    broker: Any, unique: Any
) -> None:
    queue = unique("classic")
    with channel(broker.url) as ch:
        ch.queue_declare(queue, durable=True)
    reader = queue_reader(broker.url, queue, batch=10)
    try:
        rows, end = reader.read({"next": 40})
        assert (rows_of(rows), end) == ([], {"next": 40})  # nothing there: the batch stays put
        assert list(reader.readBetweenOffsets({"next": 0}, {"next": 40})) == []
    finally:
        reader.close()


def test_an_available_now_run_hands_over_only_what_was_there_when_it_started(
    broker: Any, unique: Any
) -> None:
    queue = unique("classic")
    with channel(broker.url) as ch:
        ch.queue_declare(queue, durable=True)
    publish(broker.url, queue, 25)
    reader = queue_reader(broker.url, queue, batch=10)  # prefetch 20
    try:
        reader.initialOffset()
        # With the prefetch full nothing is on its way: 20 held and 5 ready.
        wait_until(lambda: reader.waiting == 20, timeout=10, what="a full prefetch")
        reader.prepareForTriggerAvailableNow()
        publish(broker.url, queue, 7, start=25)  # after the run started: not in it
        _first, end = read_batch(reader, 0, 10)
        _second, end = read_batch(reader, end, 10)  # acks the first: 10 more come
        wait_until(lambda: reader.waiting >= 10, timeout=10, what="deliveries after an ack")
        rows, after = reader.read({"next": end})
        assert [row[4] for row in rows_of(rows)] == [f"id-{n}" for n in range(20, 25)]
        assert after == {"next": 25}
        rows, after = reader.read(after)
        assert (rows_of(rows), after) == ([], {"next": 25})  # the run is over
        # It closed its consumer: the later messages wait in the queue for the next run.
        assert reader.waiting == 0
        assert message_count(broker.url, queue) == 7
        assert reader.read(after)[1] == after  # asked again, it does not consume
        assert consumer_count(broker.url, queue) == 0
    finally:
        reader.close()


def test_a_run_that_starts_its_consumer_waits_for_the_messages_it_counted(
    broker: Any, unique: Any
) -> None:
    """A restarted query's run starts its consumer in prepareForTriggerAvailableNow (Spark
    calls no initialOffset then) and asks for a batch at once; Spark ends the run at the
    first empty batch, so the batch waits for the deliveries of messages it counted."""
    queue = unique("classic")
    with channel(broker.url) as ch:
        ch.queue_declare(queue, durable=True)
    publish(broker.url, queue, 25)
    reader = queue_reader(broker.url, queue, batch=10)
    try:
        reader.prepareForTriggerAvailableNow()
        sizes = []
        start = {"next": 0}
        for _ in range(4):
            rows, start = reader.read(start)
            sizes.append(len(rows_of(rows)))
        assert sizes == [10, 10, 5, 0]
    finally:
        reader.close()
