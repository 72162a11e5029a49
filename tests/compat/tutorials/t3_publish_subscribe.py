"""Tutorial 3, "Publish/Subscribe": emit_log broadcasts to the fanout exchange 'logs'; every
receive_logs binds its own exclusive, server-named queue to it, so each one gets every message.
"""

from __future__ import annotations

from collections.abc import Iterable

from pika import BasicProperties
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic

from ._common import Listener, connect, consume_until_done


def emit_log(url: str, messages: Iterable[str], exchange: str = "logs") -> None:
    connection = connect(url)
    channel = connection.channel()
    channel.exchange_declare(exchange=exchange, exchange_type="fanout")
    for message in messages:
        # A fanout exchange ignores the routing key.
        channel.basic_publish(exchange=exchange, routing_key="", body=message)
        print(f" [x] Sent {message!r}")
    connection.close()


def receive_logs(
    url: str, listener: Listener, exchange: str = "logs", timeout: float = 10.0
) -> None:
    connection = connect(url)
    channel = connection.channel()
    channel.exchange_declare(exchange=exchange, exchange_type="fanout")
    # An empty name asks the server to pick one; exclusive removes the queue with the connection.
    result = channel.queue_declare(queue="", exclusive=True)
    queue_name = result.method.queue
    listener.queue = queue_name
    channel.queue_bind(exchange=exchange, queue=queue_name)

    def callback(
        ch: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes
    ) -> None:
        print(f" [x] {body!r}")
        listener.messages.append(body.decode())

    channel.basic_consume(queue=queue_name, on_message_callback=callback, auto_ack=True)
    print(" [*] Waiting for logs.")
    consume_until_done(connection, listener, timeout)
    connection.close()
