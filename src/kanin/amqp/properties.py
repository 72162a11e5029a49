"""Decoding basic content-header properties, on the publish hot path.

pamqp's generic decoder (ContentHeader.unmarshal) was about a tenth of the broker's
CPU per publish in profiles (bench/README.md, "Hot path"): it builds a ContentHeader,
validates, and dispatches each field through a type table. This decoder reads the
fields in place and returns the same pamqp Basic.Properties, unvalidated, as pamqp
would; field tables still go through pamqp's decoder, which checks them, once their
nesting is known to be within bounds (tables.py).

The timestamp stays the integer it is on the wire. pamqp makes a datetime of it, which
fails for values RabbitMQ accepts (2**64 - 1 is past year 9999) and, above 2**32 - 1,
takes it for milliseconds, so re-encoding would change it.

Publishers mostly send the same properties with every message, so decoded properties
without per-message fields are cached by their bytes. Cached objects are shared:
code that changes a message's properties copies them first (dead-lettering), and the
two fields publishing rewrites in place (headers, reply_to) are never cached.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from pamqp import commands
from pamqp import decode as pamqp_decode

from kanin.amqp import constants as C
from kanin.amqp.errors import ConnectionError_
from kanin.amqp.tables import check_table_depth

Properties = commands.Basic.Properties

_SHORTSTR, _OCTET, _TABLE, _TIMESTAMP = range(4)
_KINDS = {"shortstr": _SHORTSTR, "octet": _OCTET, "table": _TABLE, "timestamp": _TIMESTAMP}
# (attribute, flag bit, wire kind) in wire order, as pamqp declares them.
_FIELDS: tuple[tuple[str, int, int], ...] = tuple(
    (name, Properties.flags[name], _KINDS[Properties.amqp_type(name)])
    for name in Properties.__slots__
)
_UNSET = {name: getattr(Properties(), name) for name in Properties.__slots__}  # pamqp defaults
_FLAGS: Final = struct.Struct(">H")
_TIMESTAMP_VALUE: Final = struct.Struct(">Q")

# Properties publishing rewrites in place, or that differ from message to message.
_NOT_CACHED = sum(
    Properties.flags[name]
    for name in ("headers", "reply_to", "message_id", "correlation_id", "timestamp")
)
_CACHE_MAX: Final = 1024
_cache: dict[bytes, Any] = {}

_HEADER_FIXED_SIZE: Final = 12  # class id, weight, body size
_EXPIRATION_FLAG: Final = Properties.flags["expiration"]


def decode_properties(header_payload: bytes) -> Any:
    """The Basic.Properties of a content-header payload; 502 when malformed."""
    data = header_payload[_HEADER_FIXED_SIZE:]
    cached = _cache.get(data)
    if cached is not None:
        return cached
    try:
        flags, properties = _decode(data)
    except (ValueError, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ConnectionError_(C.SYNTAX_ERROR, f"invalid content header: {exc}") from exc
    if not flags & _NOT_CACHED:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[data] = properties
    return properties


def sets_expiration(header_payload: bytes) -> bool:
    """Whether a content header carries an expiration, read from its flags alone."""
    if len(header_payload) < _HEADER_FIXED_SIZE + _FLAGS.size:
        return False
    (flags,) = _FLAGS.unpack_from(header_payload, _HEADER_FIXED_SIZE)
    return bool(flags & _EXPIRATION_FLAG)


def _decode(data: bytes) -> tuple[int, Any]:
    if len(data) < 2:
        raise ValueError("content header flags are truncated")
    (flags,) = _FLAGS.unpack_from(data, 0)
    offset = 2
    word = flags
    while word & 1:  # continuation words: basic defines no properties in them
        (word,) = _FLAGS.unpack_from(data, offset)
        offset += 2
    properties = Properties.__new__(Properties)
    values = dict(_UNSET)
    for name, flag, kind in _FIELDS:
        if not flags & flag:
            continue
        if kind == _SHORTSTR:
            end = offset + 1 + data[offset]
            if end > len(data):
                raise ValueError(f"{name} is truncated")
            values[name] = data[offset + 1 : end].decode("utf-8")
            offset = end
        elif kind == _OCTET:
            values[name] = data[offset]
            offset += 1
        elif kind == _TABLE:
            check_table_depth(data, offset)  # before pamqp's decoder recurses
            consumed, values[name] = pamqp_decode.field_table(data[offset:])
            offset += consumed
        else:
            if offset + 8 > len(data):
                raise ValueError(f"{name} is truncated")
            (values[name],) = _TIMESTAMP_VALUE.unpack_from(data, offset)
            offset += 8
    for name, value in values.items():
        setattr(properties, name, value)
    return flags, properties
