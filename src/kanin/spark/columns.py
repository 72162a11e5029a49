"""Which input columns the sink uses and where they are, checked when Spark plans the write.

`body` is required (binary, or string sent as UTF-8); routing_key, message_id,
correlation_id (strings) and headers (map<string,string>) are optional; the idColumn, if
named, may be of any type and its values are sent as text. Other columns are ignored,
so rows read from kanin can be written back as they are. Column names match
case-insensitively, as Spark's do by default.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import BinaryType, DataType, MapType, StringType, StructType

from kanin.spark.options import ID_COLUMN
from kanin.spark.rows import (
    BODY,
    CORRELATION_ID_COLUMN,
    HEADERS_COLUMN,
    MESSAGE_ID_COLUMN,
    ROUTING_KEY_COLUMN,
    STRING_COLUMNS,
)


class SchemaError(ValueError):
    """The DataFrame given to the sink lacks a column it needs, or has one of a wrong type."""


@dataclass(frozen=True)
class ColumnLayout:
    """Positions of the columns the sink reads in each row (None: not there)."""

    body: int
    routing_key: int | None = None
    headers: int | None = None
    message_id: int | None = None
    correlation_id: int | None = None
    message_key: int | None = None  # the idColumn


def column_layout(schema: StructType, id_column: str | None) -> ColumnLayout:
    where = {field.name.lower(): index for index, field in enumerate(schema.fields)}
    types = {field.name.lower(): field.dataType for field in schema.fields}
    if BODY not in where:
        shown = ", ".join(schema.fieldNames()) or "none"
        raise SchemaError(
            f"format 'kanin' writes a column named {BODY!r} (binary or string) as each "
            f"message's body; this DataFrame has none (columns: {shown})"
        )
    _check_type(BODY, types[BODY], (BinaryType(), StringType()), "binary or string")
    for name in STRING_COLUMNS:
        if name in types:
            _check_type(name, types[name], (StringType(),), "string")
    if HEADERS_COLUMN in types:
        _check_type(
            HEADERS_COLUMN,
            types[HEADERS_COLUMN],
            (MapType(StringType(), StringType()), MapType(StringType(), StringType(), False)),
            "map<string,string>",
        )
    if id_column is not None and id_column.lower() not in where:
        raise SchemaError(f"option {ID_COLUMN!r} names column {id_column!r}, not in the DataFrame")
    return ColumnLayout(
        body=where[BODY],
        routing_key=where.get(ROUTING_KEY_COLUMN),
        headers=where.get(HEADERS_COLUMN),
        message_id=where.get(MESSAGE_ID_COLUMN),
        correlation_id=where.get(CORRELATION_ID_COLUMN),
        message_key=where[id_column.lower()] if id_column is not None else None,
    )


def _check_type(name: str, found: DataType, allowed: tuple[DataType, ...], said: str) -> None:
    if found not in allowed:
        raise SchemaError(f"column {name!r} must be {said}, not {found.simpleString()}")
