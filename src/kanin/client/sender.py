"""The sending half: publish, wait for the confirm, retransmit until there is one."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange

from kanin.client.headers import BIZ_ID_HEADER, INNER_ID_HEADER
from kanin.client.lifecycle import Started

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait for a confirm, and how often and how far apart to try again."""

    confirm_timeout_s: float = 10.0
    max_attempts: int = 10
    backoff_s: float = 0.1  # before the second attempt; doubled each time after that
    backoff_max_s: float = 10.0

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1, 2, ...)."""
        return float(min(self.backoff_s * 2 ** (attempt - 1), self.backoff_max_s))


class SendFailed(Exception):
    """No confirm came for a message after every attempt the retry policy allows."""

    def __init__(self, biz_id: str, attempts: int, last_error: BaseException | None) -> None:
        super().__init__(
            f"message {biz_id!r} not confirmed after {attempts} attempts: {last_error!r}"
        )
        self.biz_id = biz_id
        self.attempts = attempts
        self.last_error = last_error


class Sender(Started):
    """Publishes to one exchange (the default one unless named) in confirm mode.

    Use as `async with Sender(url, routing_key="orders") as sender:`, then
    `await sender.send(body, biz_id="order-4711")` from any number of tasks."""

    def __init__(
        self,
        url: str,
        exchange: str = "",
        routing_key: str = "",
        *,
        retry: RetryPolicy | None = None,
        persistent: bool = True,
        reconnect_interval_s: float = 0.5,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        self.exchange_name = exchange
        self.routing_key = routing_key
        self.retry = retry or RetryPolicy()
        self.persistent = persistent
        self._reconnect_interval_s = reconnect_interval_s
        self._connect_timeout_s = connect_timeout_s
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._connecting = asyncio.Lock()  # one reconnection at a time, for every send
        self._closed = False
        self.retransmits = 0  # attempts after the first, over all messages
        self.connections = 0  # made so far (the first, then one per reconnection)

    async def start(self) -> None:
        """Connect now (sends would connect on first use anyway): a wrong URL shows here."""
        await self._ready_exchange()

    async def close(self) -> None:
        self._closed = True
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def send(
        self,
        body: bytes,
        *,
        biz_id: str,
        routing_key: str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> None:
        """Publish until confirmed; SendFailed if the retry policy gives up first. Every
        attempt carries the same inner id, so the broker can drop the repeats."""
        inner_id = uuid.uuid4().hex
        key = self.routing_key if routing_key is None else routing_key
        all_headers = {**(headers or {}), INNER_ID_HEADER: inner_id, BIZ_ID_HEADER: biz_id}
        last_error: BaseException | None = None
        policy = self.retry
        for attempt in range(1, policy.max_attempts + 1):
            if attempt > 1:
                self.retransmits += 1
            message = aio_pika.Message(
                body,
                headers=all_headers,
                message_id=inner_id,
                delivery_mode=(
                    aio_pika.DeliveryMode.PERSISTENT
                    if self.persistent
                    else aio_pika.DeliveryMode.NOT_PERSISTENT
                ),
            )
            try:
                exchange = await self._ready_exchange()
                await asyncio.wait_for(
                    exchange.publish(message, routing_key=key, mandatory=True),
                    policy.confirm_timeout_s,
                )
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a nack, a return, a timeout, a lost connection
                last_error = exc
                log.debug("message %r, attempt %d: %r", biz_id, attempt, exc)
            if attempt < policy.max_attempts:
                await asyncio.sleep(policy.backoff(attempt))
        raise SendFailed(biz_id, policy.max_attempts, last_error)

    async def _ready_exchange(self) -> AbstractExchange:
        """The exchange on an open channel in confirm mode: a connection or channel that
        was lost is made again here, by the first send to need it (the others wait)."""
        async with self._connecting:
            if self._closed:
                raise RuntimeError("the sender is closed")
            if self._connection is None or not _alive(self._connection):
                if self._connection is not None:
                    await asyncio.sleep(self._reconnect_interval_s)
                self._channel = self._exchange = None
                self._connection = await aio_pika.connect(self.url, timeout=self._connect_timeout_s)
                self.connections += 1
            if self._channel is None or self._channel.is_closed:
                self._exchange = None
                self._channel = await self._connection.channel(
                    publisher_confirms=True, on_return_raises=True
                )
            if self._exchange is None:
                self._exchange = (
                    self._channel.default_exchange
                    if not self.exchange_name
                    else await self._channel.get_exchange(self.exchange_name, ensure=False)
                )
            return self._exchange


def _alive(connection: AbstractConnection) -> bool:
    # is_closed only says whether close() was called; `connected` goes when the link does.
    return connection.connected.is_set() and not connection.is_closed
