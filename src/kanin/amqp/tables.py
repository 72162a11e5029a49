"""Encoding content-header properties, with control over integer field types.

pamqp encodes every int in a field table with the narrowest type that fits. Where
RabbitMQ's clients expect a particular type (x-death's `count` is always a signed
64-bit 'l'), the broker marks the value as `LongLong` and this encoder honours it.
Everything else is encoded as pamqp would.
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import commands
from pamqp import encode as pamqp_encode

_BASIC_HEADER = struct.Struct(">HHQ")
BASIC_CLASS_ID = 60


class LongLong(int):
    """An int that goes on the wire as a signed 64-bit field ('l')."""


def encode_value(value: Any) -> bytes:
    if isinstance(value, LongLong):
        return b"l" + struct.pack(">q", value)
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if isinstance(value, list):
        items = b"".join(encode_value(item) for item in value)
        return b"A" + struct.pack(">I", len(items)) + items
    return bytes(pamqp_encode.encode_table_value(value))


def encode_table(table: dict[str, Any]) -> bytes:
    fields = b"".join(
        bytes((len(key.encode()),)) + key.encode() + encode_value(value)
        for key, value in table.items()
    )
    return struct.pack(">I", len(fields)) + fields


def encode_properties(properties: commands.Basic.Properties) -> bytes:
    flags = 0
    parts: list[bytes] = []
    for name in properties.__slots__:
        value = getattr(properties, name)
        if value is None or value == "":
            continue
        flags |= properties.flags[name]
        if name == "headers":
            parts.append(encode_table(value))
        else:
            parts.append(pamqp_encode.by_type(value, properties.amqp_type(name)))
    return struct.pack(">H", flags) + b"".join(parts)


def encode_header(body_size: int, properties: commands.Basic.Properties) -> bytes:
    """A whole content-header payload: class, weight, body size and properties."""
    return _BASIC_HEADER.pack(BASIC_CLASS_ID, 0, body_size) + encode_properties(properties)
