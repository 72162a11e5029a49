"""Rows read handed to Spark as Arrow record batches.

A Python data source's read() may yield tuples, which PySpark's worker then converts to
Arrow one value at a time in Python, or Arrow record batches, which it passes on as they
are. Building each column with one pyarrow call is several times cheaper, and for a
stream read the conversion was a large share of the time. The schema must be exactly
the one PySpark derives from READ_SCHEMA (it checks), timestamps in UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice

import pyarrow as pa

from kanin.spark.rows import Row

BATCH_ROWS = 4096

ARROW_SCHEMA = pa.schema(
    [
        pa.field("body", pa.binary()),
        pa.field("routing_key", pa.string()),
        pa.field("exchange", pa.string()),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("message_id", pa.string()),
        pa.field("correlation_id", pa.string()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("redelivered", pa.bool_()),
        pa.field("offset", pa.int64()),
    ]
)


def record_batches(rows: Iterable[Row], size: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The rows, `size` at a time, as record batches of ARROW_SCHEMA."""
    iterator = iter(rows)
    while chunk := list(islice(iterator, size)):
        yield record_batch(chunk)


def record_batch(rows: list[Row]) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    headers = [list(mapping.items()) for mapping in columns[3]]
    arrays = [
        pa.array(column, type=field.type) if index != 3 else pa.array(headers, field.type)
        for index, (column, field) in enumerate(zip(columns, ARROW_SCHEMA, strict=True))
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
