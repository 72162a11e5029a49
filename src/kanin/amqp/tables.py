"""Field tables: how deep they may nest, and encoding them (and content properties).

Nesting. pamqp's decoder, and the encoder here, recurse once per nested table or array;
a table nested some hundreds deep overflows Python's stack. RabbitMQ 3.10 has no limit
below the frame size (about 21,800 levels in a 128 KiB frame). kanin refuses tables
nested deeper than MAX_TABLE_DEPTH before decoding them, with the error a malformed
table gets, so every table it accepts can be decoded and encoded again (dead-lettering
re-encodes headers). Real headers nest a few levels; 100 leaves the encoder's
recursion (three Python frames a level) far below the interpreter's limit.

Encoding. pamqp encodes every int in a field table with the narrowest type that fits.
Where RabbitMQ's clients expect a particular type (x-death's `count` is always a signed
64-bit 'l'), the broker marks the value as `LongLong` and this encoder honours it.
Floats go out as doubles (pamqp would pick a 32-bit float, which cannot hold every
decoded double) and bytes (a long string that was not UTF-8) as long strings, so
everything the decoder returns can be encoded. The rest is encoded as pamqp would.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from pamqp import commands
from pamqp import encode as pamqp_encode

from kanin.amqp.longlong import LongLong as LongLong

_BASIC_HEADER: Final = struct.Struct(">HHQ")
_TIMESTAMP: Final = struct.Struct(">Q")
BASIC_CLASS_ID: Final = 60


MAX_TABLE_DEPTH: Final = 100  # the outermost table is depth 1

_LENGTH: Final = struct.Struct(">I")
# Sizes of the scalar field values pamqp decodes (pamqp.decode.TABLE_MAPPING).
_FIXED_SIZES = {
    **dict.fromkeys(b"tbB", 1),
    **dict.fromkeys(b"su", 2),
    **dict.fromkeys(b"Iif", 4),
    **dict.fromkeys(b"lLdT", 8),
    ord("D"): 5,
    ord("V"): 0,
    0: 0,
}
_SIZED = frozenset(b"Sx")  # a 32-bit length, then that many bytes
_TABLE, _ARRAY = ord("F"), ord("A")


class TableTooDeep(ValueError):
    pass


def check_table_depth(data: bytes, offset: int = 0, limit: int = MAX_TABLE_DEPTH) -> None:
    """Raise TableTooDeep if the field table at `offset` nests more than `limit` deep.

    Walks the bytes in the order pamqp's decoder will, without recursing and in linear
    time; where the bytes are malformed it stops quietly, and the decoder that runs
    next reports them.
    """
    ends: list[int] = []  # where each open container ends
    in_table: list[bool] = []  # whether it is a table (whose fields have names)
    size = len(data)
    position = _open(data, offset, ends, in_table, True, limit)
    while ends and position < size:
        if position >= ends[-1]:
            if in_table.pop():
                position = ends[-1]  # pamqp resumes after a table's announced end
            ends.pop()
            continue
        if in_table[-1]:
            position += 1 + data[position]  # the field name
            if position >= size:
                return
        kind = data[position]
        position += 1
        if kind in (_TABLE, _ARRAY):
            position = _open(data, position, ends, in_table, kind == _TABLE, limit)
        elif kind in _SIZED and position + 4 <= size:
            position += 4 + _LENGTH.unpack_from(data, position)[0]
        elif kind in _FIXED_SIZES:
            position += _FIXED_SIZES[kind]
        else:
            return


def _open(
    data: bytes, position: int, ends: list[int], in_table: list[bool], table: bool, limit: int
) -> int:
    if len(ends) >= limit:
        raise TableTooDeep(f"field table nested deeper than {limit} levels")
    if position + 4 > len(data):
        return len(data)  # truncated: the decoder will say so
    ends.append(position + 4 + _LENGTH.unpack_from(data, position)[0])
    in_table.append(table)
    return position + 4


def encode_value(value: Any) -> bytes:
    if isinstance(value, LongLong):
        return b"l" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"d" + struct.pack(">d", value)
    if isinstance(value, bytes):
        return b"S" + _LENGTH.pack(len(value)) + value
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
        elif name == "timestamp":
            # An int, as properties.py decodes it: written back exactly, whatever its size.
            parts.append(_TIMESTAMP.pack(value))
        else:
            parts.append(pamqp_encode.by_type(value, properties.amqp_type(name)))
    return struct.pack(">H", flags) + b"".join(parts)


def encode_header(body_size: int, properties: commands.Basic.Properties) -> bytes:
    """A whole content-header payload: class, weight, body size and properties."""
    return _BASIC_HEADER.pack(BASIC_CLASS_ID, 0, body_size) + encode_properties(properties)


def encode_header_with(
    body_size: int, properties: commands.Basic.Properties, headers: dict[str, Any]
) -> bytes:
    """encode_header with `headers` in place of the properties' own, which are left as
    they were: copying a pamqp Properties (copy.copy) costs more than encoding it."""
    own = properties.headers
    properties.headers = headers
    try:
        return encode_header(body_size, properties)
    finally:
        properties.headers = own
