"""The stream reader's broker side without Spark: finding a stream's extent, keeping the
offsets connection alive while the caller is blocked, reading a range and closing cleanly.

Spark's streaming source process sits blocked on the JVM while a micro-batch runs; the
connection it keeps for finding the tail must still answer heartbeats then. These run the
reader's own methods directly, against a real broker.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from spark_helpers import STREAM, channel, declare_stream, publish

from kanin.spark import extent
from kanin.spark.client import KaninSparkError
from kanin.spark.offsets import OffsetRange, StreamExtent
from kanin.spark.options import Role, parse_options
from kanin.spark.reader import KaninStreamReader
from kanin.spark.stream_read import read_range
from kanin.spark.tail_scan import TailScanProbe

pytestmark = [pytest.mark.spark, pytest.mark.kanin_only, pytest.mark.timeout(60)]


def stream_reader(url: str, queue: str) -> KaninStreamReader:
    return KaninStreamReader(parse_options({"uri": url, "queue": queue}, Role.READ))


def test_an_empty_stream_starts_at_0_and_batches_wait_for_messages(broker: Any) -> None:
    queue = declare_stream(broker.url, "empty")
    reader = stream_reader(broker.url, queue)
    try:
        assert reader.initialOffset() == {"next": 0}
        assert reader.latestOffset({"next": 0}, ReadAllAvailable()) == {"next": 0}
        publish(broker.url, queue, 30)
        assert reader.latestOffset({"next": 0}, ReadMaxRows(20)) == {"next": 20}
        assert reader.latestOffset({"next": 20}, ReadMaxRows(20)) == {"next": 30}
    finally:
        reader.stop()


def test_available_now_stops_at_the_tail_it_found_when_prepared(broker: Any) -> None:
    queue = declare_stream(broker.url, "now")
    publish(broker.url, queue, 10)
    reader = stream_reader(broker.url, queue)
    try:
        reader.prepareForTriggerAvailableNow()
        publish(broker.url, queue, 5, start=10)
        assert reader.latestOffset({"next": 0}, ReadAllAvailable()) == {"next": 10}
    finally:
        reader.stop()


def test_the_offsets_connection_outlives_a_blocked_caller(broker_factory: Any) -> None:
    with broker_factory(heartbeat_s=1) as broker:
        queue = declare_stream(broker.url, "hb")
        publish(broker.url, queue, 5)
        reader = stream_reader(broker.url, queue)
        try:
            assert reader.initialOffset() == {"next": 0}
            probe = reader._probe
            assert probe is not None
            connection = probe._connection
            time.sleep(4)  # four heartbeat intervals with the caller doing nothing
            assert connection is not None and not connection.is_closed
            assert reader.latestOffset({"next": 0}, ReadAllAvailable()) == {"next": 5}
            assert probe._connection is connection  # the same one, not a reconnection
        finally:
            reader.stop()


def test_a_range_read_gets_its_offsets_and_closes_without_a_reject(
    broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = declare_stream(broker.url, "range")
    publish(broker.url, queue, 3000)
    options = parse_options({"uri": broker.url, "queue": queue}, Role.READ)

    def closes() -> list[str]:
        return [
            r.getMessage() for r in caplog.records if "closing AMQP connection" in r.getMessage()
        ]

    with caplog.at_level(logging.INFO, logger="kanin"):
        rows = list(read_range(options, OffsetRange(100, 600)))  # credit left unused at the end
        for _ in range(500):  # the broker logs the close on its own thread, when it can
            if closes():
                break
            time.sleep(0.02)

    assert [row[8] for row in rows] == list(range(100, 600))
    assert rows[0][0] == b"m100"
    closed = closes()
    assert any("client closed it" in message for message in closed), closed
    # No 540 NOT_IMPLEMENTED (a basic.reject on a stream): the code, not a port with 540 in it.
    assert not any(re.search(r"\b540\b|reject", message) for message in closed), closed
    assert list(read_range(options, OffsetRange(100, 600))) == rows  # read again: the same


def test_after_retention_the_extent_never_overshoots_and_refreshes_to_exact(
    broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = "retained"
    with channel(broker.url) as ch:
        ch.queue_declare(
            queue,
            durable=True,
            arguments={
                **STREAM,
                "x-stream-max-segment-size-bytes": 20_000,
                "x-max-length-bytes": 60_000,
            },
        )
    publish(broker.url, queue, 100)
    reader = stream_reader(broker.url, queue)
    try:
        assert reader.latestOffset({"next": 0}, ReadAllAvailable()) == {"next": 100}
        publish_padded(broker.url, queue, 2000, start=100)
        remembered = reader.latestOffset({"next": 0}, ReadAllAvailable())["next"]
        assert 100 <= remembered <= 2100  # an old first offset: short, never past the tail

        monkeypatch.setattr(extent, "FIRST_REFRESH_S", 0.0)
        assert reader.latestOffset({"next": 0}, ReadAllAvailable()) == {"next": 2100}
        first = reader.initialOffset()["next"]
    finally:
        reader.stop()
    assert first > 0  # retention removed the oldest segments
    options = parse_options({"uri": broker.url, "queue": queue}, Role.READ)
    assert [row[8] for row in read_range(options, OffsetRange(0, 2100))] == list(range(first, 2100))


def publish_padded(url: str, queue: str, count: int, start: int) -> None:
    """Messages of 100 bytes, enough to fill segments. Only the last is confirmed: a
    channel's messages are appended in order, so once it is, all are."""
    with channel(url) as ch:
        for n in range(start, start + count):
            if n == start + count - 1:
                ch.confirm_delivery()
            ch.basic_publish("", queue, (b"m%d" % n).ljust(100, b"."))


def test_a_range_read_gets_bodies_of_any_size_whole(broker: Any) -> None:
    """Empty bodies, bodies of many frames (kanin's frame_max is 128 KiB), small ones."""
    queue = declare_stream(broker.url, "sizes")
    bodies = [b"", b"x" * 300_000, b"small", bytes(range(256)) * 1000, b""]
    with channel(broker.url) as ch:
        ch.confirm_delivery()
        for body in bodies:
            ch.basic_publish("", queue, body)
    options = parse_options({"uri": broker.url, "queue": queue}, Role.READ)
    rows = list(read_range(options, OffsetRange(0, len(bodies))))
    assert [row[0] for row in rows] == bodies
    assert [row[8] for row in rows] == list(range(len(bodies)))


def test_a_range_read_names_a_missing_stream_and_refused_credentials(broker: Any) -> None:
    missing = parse_options({"uri": broker.url, "queue": "nowhere"}, Role.READ)
    with pytest.raises(KaninSparkError, match=r"no queue 'nowhere' \(option 'queue'\)"):
        list(read_range(missing, OffsetRange(0, 10)))
    wrong = broker.url.replace("guest:guest@", "guest:wrongpass@")
    refused = parse_options({"uri": wrong, "queue": "nowhere"}, Role.READ)
    with pytest.raises(KaninSparkError, match=r"refused user 'guest'") as raised:
        list(read_range(refused, OffsetRange(0, 10)))
    assert "wrongpass" not in str(raised.value)


def test_the_tail_scan_used_on_other_brokers_finds_the_extent_on_kanin_too(
    broker: Any, unique: Any
) -> None:
    """tail_scan.py, what stream mode uses where the count lags (RabbitMQ), run here so the
    suite covers it without RabbitMQ: an empty stream, a full one, one that grew, and a
    classic queue refused before anything is taken from it."""
    queue = declare_stream(broker.url, unique("st"))
    probe = TailScanProbe(parse_options({"uri": broker.url, "queue": queue}, Role.READ))
    assert probe.scan() is None
    publish(broker.url, queue, 1200)
    assert probe.scan() == StreamExtent(0, 1200)
    publish(broker.url, queue, 30, start=1200)
    assert probe.scan() == StreamExtent(0, 1230)

    classic = unique("classic")
    with channel(broker.url) as ch:
        ch.queue_declare(classic)
    publish(broker.url, classic, 2)
    options = parse_options({"uri": broker.url, "queue": classic}, Role.READ)
    with pytest.raises(KaninSparkError, match="is not a stream"):
        TailScanProbe(options).scan()
    with channel(broker.url) as ch:
        assert ch.queue_declare(classic, passive=True).method.message_count == 2
