"""publish_batch: how the columns of an Arrow record batch become messages (no broker; a
recording stand-in for the socket publisher)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from kanin.spark import publish
from kanin.spark.columns import ColumnLayout
from kanin.spark.ids import column_message_id
from kanin.spark.options import Role, parse_options


class Recorder:
    def __init__(self) -> None:
        self.messages: list[tuple[Any, ...]] = []
        self.flushed_at: list[int] = []

    def publish(self, *message: Any) -> None:
        self.messages.append(message)

    def flush(self) -> None:
        self.flushed_at.append(len(self.messages))


def positional(keys: list[Any] | None, first: int, rows: int) -> list[str]:
    assert keys is None
    return [f"w:r{index}" for index in range(first, first + rows)]


OPTIONS = parse_options({"uri": "amqp://localhost/", "queue": "q"}, Role.WRITE)


def test_each_row_becomes_one_message_with_its_optional_columns() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "other": [1, 2],
            "body": [b"one", b"two"],
            "routing_key": ["k1", None],
            "headers": pa.array(
                [[("region", "eu"), ("gone", None)], None], pa.map_(pa.string(), pa.string())
            ),
            "message_id": ["own-1", None],
            "correlation_id": [None, "c-2"],
        }
    )
    layout = ColumnLayout(body=1, routing_key=2, headers=3, message_id=4, correlation_id=5)
    sent = Recorder()

    rows = publish.publish_batch(sent, OPTIONS, layout, batch, positional, 10)

    assert rows == 2
    assert sent.messages == [
        ("k1", b"one", {"region": "eu", "x-deduplication-header": "w:r10"}, "own-1", None),
        ("q", b"two", {"x-deduplication-header": "w:r11"}, "w:r11", "c-2"),
    ]


def test_a_text_body_goes_out_as_utf8_and_a_null_body_fails_the_task() -> None:
    sent = Recorder()
    text = pa.RecordBatch.from_pydict({"body": ["žluť"]})
    publish.publish_batch(sent, OPTIONS, ColumnLayout(body=0), text, positional, 0)
    assert sent.messages[0][1] == "žluť".encode()

    empty = pa.RecordBatch.from_pydict({"body": pa.array([None], pa.binary())})
    with pytest.raises(ValueError, match="null or non-text body"):
        publish.publish_batch(sent, OPTIONS, ColumnLayout(body=0), empty, positional, 1)


def test_frames_go_out_every_flush_every_messages_of_the_task_across_batches() -> None:
    sent = Recorder()
    every = publish.FLUSH_EVERY
    first = 0
    for size in (every - 1, 2, 3 * every):
        batch = pa.RecordBatch.from_pydict({"body": [b"x"] * size})
        first += publish.publish_batch(
            sent, OPTIONS, ColumnLayout(body=0), batch, positional, first
        )
    assert sent.flushed_at == [every, 2 * every, 3 * every, 4 * every]


def test_an_id_column_gives_its_values_as_text_whatever_their_type() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    batch = pa.RecordBatch.from_pydict(
        {"body": [b"a", b"b", b"c"], "key": pa.array([when, when, None], pa.timestamp("us", "UTC"))}
    )

    def by_key(keys: list[Any] | None, first: int, _rows: int) -> list[str]:
        return [column_message_id(key, "key", first + n) for n, key in enumerate(keys or ())]

    sent = Recorder()
    with pytest.raises(ValueError, match="row 2 of this task has no message id in column 'key'"):
        publish.publish_batch(sent, OPTIONS, ColumnLayout(body=0, message_key=1), batch, by_key, 0)
    assert sent.messages == []  # ids are made before the batch's first message goes out
    batch = batch.slice(0, 2)
    publish.publish_batch(sent, OPTIONS, ColumnLayout(body=0, message_key=1), batch, by_key, 0)
    assert [m[3] for m in sent.messages] == ["2026-01-02 03:04:05+00:00"] * 2
