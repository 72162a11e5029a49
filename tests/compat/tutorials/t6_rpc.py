"""Tutorial 6, "RPC": rpc_server answers fib(n) requests taken from 'rpc_queue'; the client
sends n with a fresh correlation_id and a reply_to address and waits for the matching answer.

The client uses RabbitMQ's direct reply-to: it consumes the pseudo-queue
'amq.rabbitmq.reply-to' with no_ack and names it as reply_to; the server simply publishes to
whatever reply_to it received. `reply_mode="queue"` gives the tutorial's other form, an
exclusive server-named callback queue.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Literal

import pika
from pika import BasicProperties
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic

from ._common import Listener, connect, consume_until_done

DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"


def fib(n: int) -> int:
    if n == 0:
        return 0
    if n == 1:
        return 1
    return fib(n - 1) + fib(n - 2)


@dataclass(frozen=True)
class Request:
    n: int
    reply_to: str
    correlation_id: str


def rpc_server(
    url: str, listener: Listener, queue: str = "rpc_queue", timeout: float = 10.0
) -> None:
    """Serve until `listener.stop` is set; every request handled is recorded."""
    connection = connect(url)
    channel = connection.channel()
    channel.queue_declare(queue=queue)

    def on_request(
        ch: BlockingChannel, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        n = int(body)
        print(f" [.] fib({n})")
        listener.messages.append(Request(n, props.reply_to, props.correlation_id))
        response = fib(n)
        ch.basic_publish(
            exchange="",
            routing_key=props.reply_to,
            properties=pika.BasicProperties(correlation_id=props.correlation_id),
            body=str(response),
        )
        ch.basic_ack(delivery_tag=method.delivery_tag)

    channel.basic_qos(prefetch_count=1)
    channel.basic_consume(queue=queue, on_message_callback=on_request)
    print(" [x] Awaiting RPC requests")
    consume_until_done(connection, listener, timeout)
    connection.close()


class FibonacciRpcClient:
    def __init__(
        self,
        url: str,
        queue: str = "rpc_queue",
        reply_mode: Literal["direct", "queue"] = "direct",
    ) -> None:
        self.queue = queue
        self.connection = connect(url)
        self.channel = self.connection.channel()
        if reply_mode == "direct":
            self.callback_queue = DIRECT_REPLY_TO
        else:
            result = self.channel.queue_declare(queue="", exclusive=True)
            self.callback_queue = result.method.queue
        # Direct reply-to requires no_ack (auto_ack) consumption on the publishing channel.
        self.channel.basic_consume(
            queue=self.callback_queue, on_message_callback=self.on_response, auto_ack=True
        )
        self.response: bytes | None = None
        self.corr_id = ""
        self.stray_replies: list[str | None] = []

    def on_response(
        self, ch: BlockingChannel, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        if self.corr_id == props.correlation_id:
            self.response = body
        else:
            self.stray_replies.append(props.correlation_id)

    def call(self, n: int, timeout: float = 10.0) -> int:
        self.response = None
        self.corr_id = str(uuid.uuid4())
        self.channel.basic_publish(
            exchange="",
            routing_key=self.queue,
            properties=pika.BasicProperties(
                reply_to=self.callback_queue, correlation_id=self.corr_id
            ),
            body=str(n),
        )
        deadline = time.monotonic() + timeout
        while self.response is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no reply to fib({n}) within {timeout}s")
            self.connection.process_data_events(time_limit=0.05)
        return int(self.response)

    def close(self) -> None:
        self.connection.close()
