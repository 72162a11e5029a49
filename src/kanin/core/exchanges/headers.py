"""headers: bindings match on message header values; x-match says all or any.

As in RabbitMQ, binding keys starting with `x-` take no part in matching unless
x-match is `all-with-x` or `any-with-x`; a key bound with no value (void) only
has to be present.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError
from kanin.core.exchanges.base import Destination, Exchange
from kanin.core.field_values import same_field_value, wire_type_name

X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")


def check_x_match(binding_args: dict[str, Any]) -> None:
    """Refuse a headers binding whose x-match RabbitMQ would refuse (406)."""
    mode = binding_args.get("x-match", "all")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    if not isinstance(mode, str):
        raise ChannelError(
            C.PRECONDITION_FAILED,
            f"Invalid x-match field type {wire_type_name(mode)} (value {mode}); expected longstr",
        )
    if mode not in X_MATCH_MODES:
        raise ChannelError(
            C.PRECONDITION_FAILED,
            f'Invalid x-match field value <<"{mode}">>; expected all, any, all-with-x, or '
            "any-with-x",
        )


def headers_match(binding_args: dict[str, Any], headers: dict[str, Any]) -> bool:
    mode = binding_args.get("x-match", "all")
    with_x = mode.endswith("-with-x") if isinstance(mode, str) else False
    want_all = mode in ("all", "all-with-x")
    for key, expected in binding_args.items():
        if key == "x-match" or (key.startswith("x-") and not with_x):
            continue
        matched = key in headers and (expected is None or same_field_value(expected, headers[key]))
        if want_all and not matched:
            return False
        if not want_all and matched:
            return True
    # all: nothing failed (an empty binding matches everything); any: nothing matched.
    return want_all


class HeadersExchange(Exchange):
    type_name = "headers"

    def route(self, routing_key: str, headers: dict[str, Any]) -> Iterable[Destination]:
        return [
            b.destination for b in self.bindings.values() if headers_match(b.arguments, headers)
        ]
