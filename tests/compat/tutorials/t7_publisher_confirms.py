"""Tutorial 7, "Publisher Confirms": three ways for a publisher to learn that the broker has
taken responsibility for its messages, after `confirm.select` on the channel.

1. publish_individually: publish one message and wait for its confirm before the next.
2. publish_in_batches: publish a batch (100 by default), then wait until the whole batch is
   confirmed before the next batch.
3. handle_confirms_asynchronously: publish everything, tracking outstanding messages in a dict
   keyed by delivery tag; each ack/nack removes its tag, or with multiple=True every tag up to
   and including it.

Strategy 1 uses a BlockingConnection, whose basic_publish waits for the confirm by itself;
strategies 2 and 3 use a SelectConnection, whose callbacks see each Basic.Ack / Basic.Nack.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pika
from pika import BasicProperties
from pika.adapters.blocking_connection import BlockingChannel
from pika.channel import Channel
from pika.connection import Connection
from pika.frame import Method
from pika.spec import Basic

from ._common import connect


@dataclass
class ConfirmReport:
    published: int = 0
    acked: int = 0
    nacked: list[str] = field(default_factory=list)
    multiple_acks: int = 0  # confirms that carried multiple=True
    max_outstanding: int = 0
    timed_out: bool = False
    error: str | None = None
    elapsed_s: float = 0.0


def _properties(persistent: bool) -> BasicProperties:
    mode = pika.DeliveryMode.Persistent if persistent else pika.DeliveryMode.Transient
    return pika.BasicProperties(delivery_mode=mode)


def publish_individually(
    url: str, queue: str, messages: Sequence[str], persistent: bool = False
) -> ConfirmReport:
    report = ConfirmReport()
    start = time.monotonic()
    connection = connect(url)
    channel = connection.channel()
    channel.queue_declare(queue=queue)
    channel.confirm_delivery()
    for message in messages:
        report.published += 1
        try:
            # In confirm mode this returns only once the broker has acked the message.
            channel.basic_publish(
                exchange="", routing_key=queue, body=message, properties=_properties(persistent)
            )
        except pika.exceptions.NackError:
            report.nacked.append(message)
        else:
            report.acked += 1
    connection.close()
    report.elapsed_s = time.monotonic() - start
    return report


class _ConfirmingPublisher:
    """SelectConnection publisher; batch_size=None publishes everything at once (strategy 3)."""

    def __init__(
        self,
        url: str,
        queue: str,
        messages: Sequence[str],
        batch_size: int | None,
        persistent: bool,
        timeout: float,
    ) -> None:
        self.parameters = pika.URLParameters(url)
        self.queue = queue
        self.messages = list(messages)
        self.batch_size = batch_size
        self.persistent = persistent
        self.timeout = timeout
        self.report = ConfirmReport()
        self.outstanding: dict[int, str] = {}
        self.next_tag = 1  # delivery tags count from 1 after confirm.select
        self.next_index = 0
        self.connection: pika.SelectConnection | None = None
        self.channel: Channel | None = None

    def run(self) -> ConfirmReport:
        start = time.monotonic()
        self.connection = pika.SelectConnection(
            self.parameters,
            on_open_callback=self.on_connection_open,
            on_open_error_callback=self.on_connection_open_error,
            on_close_callback=self.on_connection_closed,
        )
        self.connection.ioloop.call_later(self.timeout, self.on_timeout)
        try:
            self.connection.ioloop.start()
        finally:
            self.connection.ioloop.close()
        self.report.elapsed_s = time.monotonic() - start
        return self.report

    def on_connection_open(self, connection: Connection) -> None:
        connection.channel(on_open_callback=self.on_channel_open)

    def on_connection_open_error(self, connection: Connection, error: BaseException) -> None:
        self.report.error = repr(error)
        assert self.connection is not None
        self.connection.ioloop.stop()

    def on_connection_closed(self, connection: Connection, reason: BaseException) -> None:
        assert self.connection is not None
        self.connection.ioloop.stop()

    def on_channel_open(self, channel: Channel) -> None:
        self.channel = channel
        channel.add_on_close_callback(self.on_channel_closed)
        channel.queue_declare(queue=self.queue, callback=self.on_queue_declared)

    def on_channel_closed(self, channel: Channel, reason: BaseException) -> None:
        if not self.finished():
            self.report.error = repr(reason)
        self.close()

    def on_queue_declared(self, frame: Method) -> None:
        assert self.channel is not None
        self.channel.confirm_delivery(
            ack_nack_callback=self.on_delivery_confirmation, callback=self.on_confirm_selected
        )

    def on_confirm_selected(self, frame: Method) -> None:
        self.publish_more()

    def publish_more(self) -> None:
        assert self.channel is not None
        remaining = len(self.messages) - self.next_index
        count = remaining if self.batch_size is None else min(self.batch_size, remaining)
        properties = _properties(self.persistent)
        for message in self.messages[self.next_index : self.next_index + count]:
            self.channel.basic_publish(
                exchange="", routing_key=self.queue, body=message, properties=properties
            )
            self.outstanding[self.next_tag] = message
            self.next_tag += 1
            self.report.published += 1
        self.next_index += count
        self.report.max_outstanding = max(self.report.max_outstanding, len(self.outstanding))

    def on_delivery_confirmation(self, frame: Method) -> None:
        method = frame.method
        acked = isinstance(method, Basic.Ack)
        tag = method.delivery_tag
        if method.multiple:
            if acked:
                self.report.multiple_acks += 1
            tags = [t for t in self.outstanding if t <= tag]
        else:
            tags = [tag] if tag in self.outstanding else []
        for t in tags:
            message = self.outstanding.pop(t)
            if acked:
                self.report.acked += 1
            else:
                self.report.nacked.append(message)
        if self.outstanding:
            return
        if self.next_index < len(self.messages):
            self.publish_more()  # the previous batch is fully confirmed
        else:
            self.close()

    def finished(self) -> bool:
        return self.next_index >= len(self.messages) and not self.outstanding

    def on_timeout(self) -> None:
        if self.finished():
            return
        self.report.timed_out = True
        self.close()
        assert self.connection is not None
        # Should the close handshake itself hang, stop anyway a little later.
        self.connection.ioloop.call_later(2.0, self.connection.ioloop.stop)

    def close(self) -> None:
        assert self.connection is not None
        if not (self.connection.is_closing or self.connection.is_closed):
            self.connection.close()


def publish_in_batches(
    url: str,
    queue: str,
    messages: Sequence[str],
    batch_size: int = 100,
    persistent: bool = False,
    timeout: float = 20.0,
) -> ConfirmReport:
    return _ConfirmingPublisher(url, queue, messages, batch_size, persistent, timeout).run()


def handle_confirms_asynchronously(
    url: str,
    queue: str,
    messages: Sequence[str],
    persistent: bool = False,
    timeout: float = 20.0,
) -> ConfirmReport:
    return _ConfirmingPublisher(url, queue, messages, None, persistent, timeout).run()


def drain(url: str, queue: str, expected: int, timeout: float = 10.0) -> list[str]:
    """Consume (with acks) up to `expected` messages from `queue`, in order of arrival."""
    received: list[str] = []
    connection = connect(url)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=500)

    def callback(
        ch: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes
    ) -> None:
        received.append(body.decode())
        ch.basic_ack(delivery_tag=method.delivery_tag)

    channel.basic_consume(queue=queue, on_message_callback=callback)
    deadline = time.monotonic() + timeout
    while len(received) < expected and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
    connection.close()
    return received
