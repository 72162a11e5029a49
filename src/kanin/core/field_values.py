"""Field-table values as RabbitMQ sees them: their type names and how they compare.

pamqp decodes tables without their wire types, so the names are the types the values
most likely arrived as (pika sends ints that fit in 32 bits as 'I', "signedint").
"""

from __future__ import annotations

from typing import Any


def wire_type_name(value: Any) -> str:
    """RabbitMQ's name for the field-table type a value most likely arrived as.

    The decoder keeps no wire type; pika sends ints that fit in 32 bits as 'I'.
    """
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, bytearray):
        return "binary"  # pamqp decodes the 'x' byte-array type to bytearray
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return "void" if value is None else type(value).__name__


def same_field_value(a: Any, b: Any) -> bool:
    """Field-table equality as RabbitMQ compares arguments: integer widths do not matter,
    but types do (true is not 1, "100" is not 100)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return type(a) is type(b) and bool(a == b)
