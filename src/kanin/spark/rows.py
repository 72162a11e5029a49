"""The rows format("kanin") reads, and the columns its sink takes.

A message becomes one row of READ_SCHEMA. Header values become text, since a Spark map
has one value type: strings as they are, bytes as UTF-8, numbers and booleans as
literals, timestamps in ISO 8601, nested tables and arrays as JSON. The timestamp
property is seconds since the epoch (UTC), so it is handed to Spark time-zone aware.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aio_pika.abc import AbstractIncomingMessage

    from kanin.spark.socket_read import Delivery

READ_SCHEMA = (
    "body binary, routing_key string, exchange string, headers map<string,string>, "
    "message_id string, correlation_id string, timestamp timestamp, redelivered boolean, "
    "offset long"
)
# Where a stream delivery says its offset (a header RabbitMQ streams set too).
STREAM_OFFSET_HEADER = "x-stream-offset"

Row = tuple[
    bytes,
    str,
    str,
    dict[str, str | None],
    str | None,
    str | None,
    datetime | None,
    bool,
    int | None,
]

# The sink's input columns: body is required; the others are optional, and any further
# columns (a stream read's offset, timestamp ...) are ignored, so a read can be written
# back as it is.
BODY = "body"
ROUTING_KEY_COLUMN = "routing_key"
HEADERS_COLUMN = "headers"
MESSAGE_ID_COLUMN = "message_id"
CORRELATION_ID_COLUMN = "correlation_id"
STRING_COLUMNS = (ROUTING_KEY_COLUMN, MESSAGE_ID_COLUMN, CORRELATION_ID_COLUMN)


def message_row(message: AbstractIncomingMessage, offset: int | None) -> Row:
    return (
        message.body,
        message.routing_key or "",
        message.exchange or "",
        headers_as_text(message.headers),
        message.message_id,
        message.correlation_id,
        message.timestamp,
        bool(message.redelivered),
        offset,
    )


def delivery_row(delivery: Delivery, headers: Mapping[str, Any], offset: int | None) -> Row:
    """The row of a delivery read off the socket (socket_read.py), its headers decoded."""
    deliver, properties = delivery.deliver, delivery.properties
    return (
        delivery.body,
        deliver.routing_key or "",
        deliver.exchange or "",
        headers_as_text(headers),
        properties.message_id,
        properties.correlation_id,
        properties.timestamp,
        bool(deliver.redelivered),
        offset,
    )


def stream_offset(headers: Mapping[str, Any]) -> int:
    """The offset a stream delivery carries; a ValueError if it has none (not a stream)."""
    value = headers.get(STREAM_OFFSET_HEADER)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"a delivery without an {STREAM_OFFSET_HEADER} header: not a stream")
    return value


def headers_as_text(headers: Mapping[str, Any] | None) -> dict[str, str | None]:
    return {str(key): header_text(value) for key, value in (headers or {}).items()}


def header_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, int | float | Decimal):
        return str(value)
    return json.dumps(value, default=_json_default, separators=(",", ":"))


def _json_default(value: Any) -> Any:
    text = header_text(value)
    return text if text is not None else None


def body_bytes(value: Any) -> bytes:
    """A body column's value as bytes: binary as it is, text as UTF-8."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise ValueError(f"a null or non-text body: {value!r}")
