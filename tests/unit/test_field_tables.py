"""Field tables: the nesting bound, and that everything the decoder accepts encodes again.

RabbitMQ 3.10 accepts tables nested as deep as a frame allows; kanin refuses more than
MAX_TABLE_DEPTH levels (see kanin/amqp/tables.py), so that no table it accepted can
overflow the stack when it is decoded or re-encoded (dead-lettering re-encodes headers).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands
from pamqp import decode as pamqp_decode

from kanin.amqp import constants as C
from kanin.amqp.errors import ConnectionError_
from kanin.amqp.methods import decode_method
from kanin.amqp.properties import decode_properties
from kanin.amqp.tables import MAX_TABLE_DEPTH, TableTooDeep, check_table_depth, encode_header

HEADER_FIXED = struct.pack(">HHQ", 60, 0, 0)
HEADERS_FLAG = 0x2000


def table(fields: bytes) -> bytes:
    return struct.pack(">I", len(fields)) + fields


def array(items: bytes) -> bytes:
    return struct.pack(">I", len(items)) + items


def headers_payload(headers_table: bytes) -> bytes:
    return HEADER_FIXED + struct.pack(">H", HEADERS_FLAG) + headers_table


def deep_headers(depth: int, container: bytes) -> bytes:
    """Content-header properties whose headers table nests `depth` levels in all."""
    inner = table(b"")
    for _ in range(depth - 2):
        inner = table(b"\x01nF" + inner) if container == b"F" else array(b"A" + inner)
    return headers_payload(table(b"\x01h" + container + inner))


@pytest.mark.parametrize("container", [b"F", b"A"])
def test_headers_at_the_bound_decode_and_encode_back_to_the_same_bytes(container: bytes) -> None:
    payload = deep_headers(MAX_TABLE_DEPTH, container)
    properties = decode_properties(payload)
    assert encode_header(0, properties) == payload


@pytest.mark.parametrize("container", [b"F", b"A"])
@pytest.mark.parametrize("depth", [MAX_TABLE_DEPTH + 1, 20_000])
def test_headers_past_the_bound_are_a_syntax_error(container: bytes, depth: int) -> None:
    with pytest.raises(ConnectionError_) as info:
        decode_properties(deep_headers(depth, container))
    assert info.value.reply_code == C.SYNTAX_ERROR
    assert info.value.reply_text == (
        "SYNTAX_ERROR - invalid content header: field table nested deeper than "
        f"{MAX_TABLE_DEPTH} levels"
    )


def declare_payload(arguments: bytes) -> bytes:
    # queue.declare: ticket, queue "q", bits, arguments
    return struct.pack(">HHH", 50, 10, 0) + b"\x01q" + b"\x00" + arguments


def test_method_arguments_at_the_bound_decode() -> None:
    method = decode_method(declare_payload(deep_headers(MAX_TABLE_DEPTH, b"F")[14:]))
    assert isinstance(method, commands.Queue.Declare)
    assert depth_of(method.arguments) == MAX_TABLE_DEPTH


@pytest.mark.parametrize("depth", [MAX_TABLE_DEPTH + 1, 20_000])
def test_method_arguments_past_the_bound_are_a_frame_error(depth: int) -> None:
    # As for any method argument that cannot be decoded, RabbitMQ's 501.
    with pytest.raises(ConnectionError_) as info:
        decode_method(declare_payload(deep_headers(depth, b"F")[14:]))
    assert info.value.reply_code == C.FRAME_ERROR
    assert info.value.reply_text.startswith("FRAME_ERROR - cannot decode <<")


def test_values_pamqp_decodes_but_would_not_encode_are_encoded() -> None:
    # A double beyond a 32-bit float's range, and a long string that is not UTF-8
    # (decoded as bytes): both used to make re-encoding, so dead-lettering, fail.
    fields = b"\x01dd" + struct.pack(">d", 1e300) + b"\x01sS" + struct.pack(">I", 2) + b"\xff\xfe"
    payload = headers_payload(table(fields))
    assert encode_header(0, decode_properties(payload)) == payload


# -- the scan agrees with the decoder -----------------------------------------------------

scalars = st.sampled_from(
    [
        b"t\x01",
        b"b\xff",
        b"B\x01",
        b"s\x00\x01",
        b"u\x00\x01",
        b"I\x00\x00\x00\x01",
        b"i\x00\x00\x00\x01",
        b"l" + bytes(8),
        b"L" + bytes(8),
        b"f" + struct.pack(">f", 1.5),
        b"d" + struct.pack(">d", 1e300),
        b"D\x02\x00\x00\x00\x07",
        b"T" + struct.pack(">Q", 1_700_000_000),
        b"V",
        b"S\x00\x00\x00\x02\xc3\xa9",
        b"S\x00\x00\x00\x01\xff",
        b"x\x00\x00\x00\x03abc",
    ]
)
keys = st.binary(max_size=3).map(lambda k: bytes((len(k),)) + k.replace(b"\x80", b"a"))


def field_values(depth: int) -> st.SearchStrategy[bytes]:
    if depth == 0:
        return scalars
    inner = field_values(depth - 1)
    # Unique names: a repeated one would hide the nesting of its first value.
    tables = st.lists(st.tuples(keys, inner), max_size=3, unique_by=lambda kv: kv[0]).map(
        lambda items: b"F" + table(b"".join(k + v for k, v in items))
    )
    arrays = st.lists(inner, max_size=3).map(lambda items: b"A" + array(b"".join(items)))
    return st.one_of(scalars, tables, arrays)


def depth_of(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


@given(
    fields=st.lists(st.tuples(keys, field_values(5)), max_size=4, unique_by=lambda kv: kv[0]),
    limit=st.integers(1, 7),
)
def test_scan_refuses_exactly_what_nests_deeper_than_the_limit(
    fields: list[tuple[bytes, bytes]], limit: int
) -> None:
    data = table(b"".join(k + v for k, v in fields))
    try:
        _, decoded = pamqp_decode.field_table(data)
    except (ValueError, UnicodeDecodeError):
        return  # keys that are not UTF-8
    deep = depth_of(decoded) > limit
    if deep:
        with pytest.raises(TableTooDeep):
            check_table_depth(data, 0, limit)
    else:
        check_table_depth(data, 0, limit)
        # ... and what is accepted encodes back to what decodes the same.
        payload = headers_payload(data)
        again = decode_properties(encode_header(0, decode_properties(payload)))
        assert again.headers == decoded
