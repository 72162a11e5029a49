"""Redeclaring an exchange or queue with other properties: RabbitMQ 3.10's 406 texts."""

from __future__ import annotations

from typing import Any

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError
from kanin.core.field_values import same_field_value, wire_type_name


def _bool(value: bool) -> str:
    return "true" if value else "false"


def check_equivalent_args(
    old: dict[str, Any], new: dict[str, Any], what: str, keys: tuple[str, ...]
) -> None:
    """406 for the first of `keys` whose value differs, in RabbitMQ 3.10's words."""
    for key in keys:
        current, received = old.get(key), new.get(key)
        if same_field_value(current, received):
            continue
        if key in old and key in new:
            texts = f"'{_shown(received)}' but current is '{_shown(current)}'"
        else:
            texts = f"{_describe(received)} but current is {_describe(current)}"
        raise ChannelError(
            C.PRECONDITION_FAILED, f"inequivalent arg '{key}' {what}: received {texts}"
        )


def check_equivalent_flags(what: str, *flags: tuple[str, bool, bool]) -> None:
    """406 for the first (name, requested, current) flag that differs, in RabbitMQ's words."""
    for field, new, old in flags:
        if new != old:
            raise ChannelError(
                C.PRECONDITION_FAILED,
                f"inequivalent arg '{field}' {what}: received '{_bool(new)}' but current is "
                f"'{_bool(old)}'",
            )


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return _bool(value)
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    return str(value)


def _describe(value: Any) -> str:
    if value is None:
        return "none"
    return f"the value '{_shown(value)}' of type '{wire_type_name(value)}'"
