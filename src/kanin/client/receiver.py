"""The receiving half: each business message processed once, then acked."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage

from kanin.client.headers import BIZ_ID_HEADER
from kanin.client.lifecycle import Started
from kanin.client.processed import ProcessedIds, SqliteProcessedIds

log = logging.getLogger(__name__)

DEFAULT_DATABASE = "kanin-processed.sqlite3"
SETTLE_TIMEOUT_S = 10.0  # an ack stuck on a dying connection: the broker requeues anyway


@dataclass(frozen=True)
class Delivery:
    """One message, as the handler sees it."""

    body: bytes
    biz_id: str
    headers: dict[str, Any]
    redelivered: bool
    # What ProcessedIds.recording yields: for SQLite, the connection in the transaction
    # that will also record the biz-id (write the handler's own rows through it).
    transaction: Any


Handler = Callable[[Delivery], Awaitable[None]]


class Receiver(Started):
    """Consumes one queue with explicit acks (never auto-ack), one message at a time.

    For each message: if its biz-id (the `x-biz-id` header, else the message id) was
    processed, it is acked and nothing else happens; otherwise the handler runs inside
    `processed.recording(biz_id)` and the message is acked once that has committed. A
    handler that raises rolls back and the message is requeued. A message with neither
    id is processed and acked without any record (at least once).
    """

    def __init__(
        self,
        url: str,
        queue: str,
        handler: Handler,
        *,
        processed: ProcessedIds | None = None,
        prefetch: int = 64,
        reconnect_interval_s: float = 0.5,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        self.queue_name = queue
        self.handler = handler
        self.processed = processed or SqliteProcessedIds(Path(DEFAULT_DATABASE))
        self.prefetch = prefetch
        self._reconnect_interval_s = reconnect_interval_s
        self._connect_timeout_s = connect_timeout_s
        self._connection: AbstractConnection | None = None
        self._lost = asyncio.Event()  # set when the connection goes, by any side
        self._running: asyncio.Task[None] | None = None
        self._one_at_a_time = asyncio.Lock()
        self.duplicates = 0  # deliveries of a biz-id already processed: acked, not handled
        self.connections = 0  # made so far (the first, then one per reconnection)

    async def start(self) -> None:
        """Connect and consume (raising if that fails now); from then on a lost
        connection is made again, and the consumer with it, until `close`."""
        await self._consume()
        self._running = asyncio.ensure_future(self._keep_consuming())

    async def close(self) -> None:
        if self._running is not None:
            self._running.cancel()
            self._running = None
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def _consume(self) -> None:
        connection = await aio_pika.connect(self.url, timeout=self._connect_timeout_s)
        self._connection = connection
        self.connections += 1
        self._lost.clear()
        connection.close_callbacks.add(lambda *_: self._lost.set())
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=self.prefetch)
        queue = await channel.get_queue(self.queue_name, ensure=False)
        await queue.consume(self._on_message, no_ack=False)

    async def _keep_consuming(self) -> None:
        while True:
            await self._lost.wait()
            await asyncio.sleep(self._reconnect_interval_s)
            try:
                await asyncio.wait_for(self._consume(), 2 * self._connect_timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker is still away: try again
                log.debug("reconnecting failed: %r", exc)
                self._lost.set()
                if self._connection is not None and not self._connection.is_closed:
                    await self._connection.close()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        async with self._one_at_a_time:
            await self._process(message)

    async def _process(self, message: AbstractIncomingMessage) -> None:
        headers = dict(message.headers or {})
        biz_id = _biz_id(headers.get(BIZ_ID_HEADER)) or message.message_id
        try:
            if biz_id is None:
                await self.handler(self._delivery(message, "", headers, None))
            elif await self.processed.seen(biz_id):
                self.duplicates += 1
            else:
                async with self.processed.recording(biz_id) as transaction:
                    await self.handler(self._delivery(message, biz_id, headers, transaction))
        except Exception:
            log.exception("handling message %r failed; it goes back to its queue", biz_id)
            await self._settle(message, ack=False)
            return
        await self._settle(message, ack=True)

    @staticmethod
    def _delivery(
        message: AbstractIncomingMessage, biz_id: str, headers: dict[str, Any], transaction: Any
    ) -> Delivery:
        return Delivery(message.body, biz_id, headers, bool(message.redelivered), transaction)

    @staticmethod
    async def _settle(message: AbstractIncomingMessage, ack: bool) -> None:
        """Ack (or requeue). If the channel is gone meanwhile the broker requeues the
        message itself, and its next delivery finds the biz-id recorded."""
        try:
            settling = message.ack() if ack else message.nack(requeue=True)
            await asyncio.wait_for(settling, SETTLE_TIMEOUT_S)
        except Exception as exc:
            log.debug("could not settle a delivery (%r): it will come again", exc)


def _biz_id(value: Any) -> str | None:
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    return str(value) if value is not None and value != "" else None
