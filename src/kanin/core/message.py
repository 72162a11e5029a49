"""A published message and its place in one queue."""

from __future__ import annotations

from typing import Any


class Message:
    """One published message, shared by every queue it was routed to.

    `header_payload` is the content header exactly as the publisher sent it, so a
    delivery forwards the same bytes; `properties` is its decoded form.
    """

    __slots__ = (
        "body",
        "cc_bcc",
        "exchange",
        "expiration_ms",
        "header_payload",
        "properties",
        "routing_key",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        header_payload: bytes,
        body: bytes,
        properties: Any,
        expiration_ms: int | None = None,
        cc_bcc: tuple[str, ...] = (),
    ) -> None:
        self.cc_bcc = cc_bcc  # sender-selected routing keys; they route the message too
        self.exchange = exchange
        self.expiration_ms = expiration_ms  # the per-message `expiration`, parsed
        self.routing_key = routing_key
        self.header_payload = header_payload
        self.body = body
        self.properties = properties

    @property
    def routing_keys(self) -> tuple[str, ...]:
        return (self.routing_key, *self.cc_bcc)

    @property
    def persistent(self) -> bool:
        return bool(self.properties.delivery_mode == 2)

    @property
    def headers(self) -> dict[str, Any]:
        return self.properties.headers or {}


class Entry:
    """A message in one queue. `seq` orders the queue; a requeue goes back to its place."""

    __slots__ = ("expires_at", "message", "redelivered", "seq", "stored_id")

    def __init__(self, message: Message, seq: int) -> None:
        self.message = message
        self.seq = seq
        self.redelivered = False
        self.stored_id = 0  # id in the message store, 0 when not persisted
        self.expires_at: float | None = None  # scheduler time after which it is dead

    def __lt__(self, other: Entry) -> bool:
        return self.seq < other.seq
