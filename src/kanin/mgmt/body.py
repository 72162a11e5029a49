"""Request bodies and query options as RabbitMQ's management plugin reads them.

rabbitmqadmin sends every value of a PUT body as a string ("true", "10"), and RabbitMQ
accepts that, so booleans and integers here are taken as JSON values or as strings.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from kanin.mgmt.errors import bad_request

_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


async def json_object(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object; an empty body is an empty object. 400 otherwise."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        document = json.loads(raw)
    except ValueError:
        raise bad_request("not_json") from None
    if not isinstance(document, dict):
        raise bad_request("not_json")
    return document


def to_bool(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise bad_request(f"not_boolean: {key} is {value!r}")


def to_int(body: dict[str, Any], key: str) -> int:
    """A required integer (JSON number or decimal string)."""
    if key not in body:
        raise bad_request(f"key_missing: {key}")
    value = body[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise bad_request(f"not_int: {key} is {value!r}")


def to_str(body: dict[str, Any], key: str, default: str | None = None) -> str:
    value = body.get(key, default)
    if value is None:
        raise bad_request(f"key_missing: {key}")
    if not isinstance(value, str):
        raise bad_request(f"not_string: {key} is {value!r}")
    return value


def to_arguments(body: dict[str, Any]) -> dict[str, Any]:
    """The `arguments` of a declare or binding: an object (rabbitmqadmin may send it as a
    JSON string)."""
    value = body.get("arguments") or {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise bad_request("arguments: not_json") from None
    if not isinstance(value, dict):
        raise bad_request(f"arguments must be an object, not {value!r}")
    return value


def tags_of(value: Any) -> tuple[str, ...]:
    """User tags as RabbitMQ takes them: a list, or one comma-separated string."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(tag.strip() for tag in value.split(",") if tag.strip())
    if isinstance(value, list) and all(isinstance(tag, str) for tag in value):
        return tuple(tag.strip() for tag in value if tag.strip())
    raise bad_request(f"tags must be a string or a list of strings, not {value!r}")
