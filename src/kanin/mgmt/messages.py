"""POST /api/exchanges/{vhost}/{name}/publish and POST /api/queues/{vhost}/{name}/get,
with RabbitMQ's bodies, answers and refusals.

A publish is routed as an AMQP basic.publish is (the user's write permission, internal
exchanges refused, CC/BCC, delayed and deduplicating exchanges), and is answered once a
persistent message is on disk, as a publisher confirm would be. A get takes up to
`count` messages as basic.get does, then settles them all by `ackmode`: ack them, or put
them back (they are then redelivered), or reject them to the dead-letter exchange.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.errors import AMQPError, ChannelError
from kanin.amqp.tables import encode_header
from kanin.core.message import Entry, Message
from kanin.core.permissions import check_permission
from kanin.core.publishing import route_without_channel, sender_selected_keys
from kanin.core.queue_args import NACKED, REJECTED, parse_expiration
from kanin.mgmt.auth import Grantee, writable_vhost
from kanin.mgmt.body import json_object, to_int, to_str
from kanin.mgmt.context import MgmtContext, context_of, user_of
from kanin.mgmt.errors import ApiError, bad_request, from_amqp
from kanin.mgmt.shapes import exchange_name_from_url, jsonable

if TYPE_CHECKING:
    from kanin.core.queues import Queue
    from kanin.core.vhost import VirtualHost

ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")
_INT_PROPERTIES = ("delivery_mode", "priority")


# -- publish -------------------------------------------------------------------------------


async def publish(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = writable_vhost(ctx.broker, user, request.match_info["vhost"])
    body = await json_object(request)
    message = build_message(
        exchange_name_from_url(request.match_info["name"]),
        to_str(body, "routing_key"),
        decode_payload(body),
        properties_from(body.get("properties") or {}),
    )
    try:
        check_permission(Grantee(user, vhost), "write", "exchange", message.exchange)
        check_user_id(message, user.name)
        check_not_internal(vhost, message.exchange)
        routed, stored = route_without_channel(vhost, message)
    except AMQPError as exc:
        raise _publish_refusal(exc) from None
    if stored:
        await on_disk(ctx)
    return web.json_response({"routed": routed})


def _publish_refusal(exc: AMQPError) -> ApiError:
    if exc.reply_code == C.ACCESS_REFUSED:
        return from_amqp(exc)
    return bad_request(f"{exc.reply_code} {exc.reply_text}")


def check_not_internal(vhost: VirtualHost, name: str) -> None:
    exchange = vhost.exchanges.get(name)
    if exchange is not None and exchange.internal:
        raise ChannelError(
            C.ACCESS_REFUSED,
            f"cannot publish to internal exchange '{name}' in vhost '{vhost.name}'",
        )


def check_user_id(message: Message, user: str) -> None:
    user_id = message.properties.user_id
    if user_id and user_id != user:
        raise ChannelError(
            C.PRECONDITION_FAILED,
            f"user_id property set to '{user_id}' but authenticated user was '{user}'",
        )


def decode_payload(body: dict[str, Any]) -> bytes:
    payload = to_str(body, "payload")
    encoding = to_str(body, "payload_encoding")
    if encoding == "string":
        return payload.encode()
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise bad_request("payload is not valid base64") from None
    raise bad_request(f"unsupported_encoding: {encoding}")


def properties_from(given: Any) -> commands.Basic.Properties:
    """Basic properties from the API's JSON (RabbitMQ's names; `type` is message_type)."""
    if not isinstance(given, dict):
        raise bad_request("properties must be an object")
    values = {("message_type" if key == "type" else key): value for key, value in given.items()}
    unknown = set(values) - set(commands.Basic.Properties.attributes())
    if unknown:
        raise bad_request(f"unknown properties: {', '.join(sorted(unknown))}")
    for key in _INT_PROPERTIES:
        if key in values:
            values[key] = to_int(values, key)
    if "timestamp" in values:
        seconds = to_int(values, "timestamp")
        values["timestamp"] = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    if "headers" in values and not isinstance(values["headers"], dict):
        raise bad_request("headers must be an object")
    try:
        return commands.Basic.Properties(**values)
    except (TypeError, ValueError) as exc:
        raise bad_request(f"invalid properties: {exc}") from None


def build_message(
    exchange: str, routing_key: str, body: bytes, properties: commands.Basic.Properties
) -> Message:
    try:
        header = encode_header(len(body), properties)
    except (TypeError, ValueError) as exc:
        raise bad_request(f"invalid properties: {exc}") from None
    try:
        expiration = parse_expiration(properties.expiration)
    except AMQPError as exc:
        raise bad_request(exc.reply_text) from None
    return Message(
        exchange,
        routing_key,
        header,
        body,
        properties,
        expiration,
        sender_selected_keys(properties.headers),
    )


async def on_disk(ctx: MgmtContext) -> None:
    """Until what was stored so far is durable (the publisher confirm's wait)."""
    store = ctx.broker.store
    if store is None:
        return
    outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    store.after_commit(outcome.set_result)
    if not await outcome:
        raise ApiError(500, "internal_server_error", "the message could not be written to disk")


# -- get -----------------------------------------------------------------------------------


async def get(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = writable_vhost(ctx.broker, user, request.match_info["vhost"])
    body = await json_object(request)
    count = to_int(body, "count")
    ackmode = to_str(body, "ackmode")
    encoding = to_str(body, "encoding")
    truncate = to_int(body, "truncate") if body.get("truncate") is not None else None
    if ackmode not in ACKMODES:
        raise bad_request(f"unknown ackmode {ackmode!r} (one of {', '.join(ACKMODES)})")
    if encoding not in ("auto", "base64"):
        raise bad_request("Unsupported encoding. Please use auto or base64.")
    name = request.match_info["name"]
    try:
        check_permission(Grantee(user, vhost), "read", "queue", name)
        queue = vhost.get_queue(name, connection=None)
        taken = await take(queue, count)
    except AMQPError as exc:
        raise from_amqp(exc) from None
    answers = [message_shape(queue, entry, left, encoding, truncate) for entry, left in taken]
    settle(queue, [entry for entry, _ in taken], ackmode)
    return web.json_response(answers)


async def take(queue: Queue, count: int) -> list[tuple[Entry, int]]:
    """Up to count messages, each with how many the queue held after it was taken."""
    taken: list[tuple[Entry, int]] = []
    for _ in range(max(count, 0)):
        entry = await _get_one(queue)
        if entry is None:
            break
        taken.append((entry, queue.message_count))
    return taken


async def _get_one(queue: Queue) -> Entry | None:
    if queue.exclusive_owner is not None:
        raise queue_locked(queue)
    answer: asyncio.Future[Entry | None] = asyncio.get_running_loop().create_future()
    queue.touch()
    queue.get(answer.set_result)  # now, or once the head is read back from the store
    return await answer


def queue_locked(queue: Queue) -> AMQPError:
    return ChannelError(
        C.RESOURCE_LOCKED,
        f"cannot obtain exclusive access to locked queue '{queue.name}' in vhost '{queue.vhost}'",
    )


def settle(queue: Queue, entries: list[Entry], ackmode: str) -> None:
    if ackmode == "ack_requeue_false":
        for entry in entries:
            queue.forget(entry)
        return
    if ackmode == "reject_requeue_false":
        queue.dead_letter(entries, "rejected")
        return
    for entry in entries:
        queue.note_delivered(entry)
    queue.requeue(entries, REJECTED if ackmode == "reject_requeue_true" else NACKED)


def message_shape(
    queue: Queue, entry: Entry, left: int, encoding: str, truncate: int | None
) -> dict[str, Any]:
    message = entry.message
    assert message is not None, "a queue hands out messages read back"
    payload = message.body if truncate is None else message.body[: max(truncate, 0)]
    text, payload_encoding = encode_payload(payload, encoding)
    return {
        "payload_bytes": len(message.body),
        "redelivered": entry.redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": left,
        "properties": properties_shape(message.properties),
        "payload": text,
        "payload_encoding": payload_encoding,
    }


def encode_payload(payload: bytes, encoding: str) -> tuple[str, str]:
    """As RabbitMQ: `auto` gives text when the payload is valid UTF-8, else base64."""
    if encoding == "auto":
        try:
            return payload.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(payload).decode(), "base64"


def properties_shape(properties: commands.Basic.Properties) -> dict[str, Any]:
    shape: dict[str, Any] = {}
    for key in commands.Basic.Properties.attributes():
        value = getattr(properties, key)
        if value is not None and value != "":  # pamqp reads an absent cluster_id as ""
            shape["type" if key == "message_type" else key] = jsonable(value)
    return shape
