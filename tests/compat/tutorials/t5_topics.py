"""Tutorial 5, "Topics": log lines go to the topic exchange 'topic_logs' under keys like
'<facility>.<severity>'; receive_logs_topic binds patterns where '*' matches exactly one word
and '#' matches zero or more words.
"""

from __future__ import annotations

from collections.abc import Iterable

from pika import BasicProperties
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic

from ._common import Listener, connect, consume_until_done


def emit_log_topic(url: str, logs: Iterable[tuple[str, str]], exchange: str = "topic_logs") -> None:
    """Publish (routing_key, message) pairs."""
    connection = connect(url)
    channel = connection.channel()
    channel.exchange_declare(exchange=exchange, exchange_type="topic")
    for routing_key, message in logs:
        channel.basic_publish(exchange=exchange, routing_key=routing_key, body=message)
        print(f" [x] Sent {routing_key}:{message}")
    connection.close()


def receive_logs_topic(
    url: str,
    listener: Listener,
    binding_keys: Iterable[str],
    exchange: str = "topic_logs",
    timeout: float = 10.0,
) -> None:
    """Record (routing_key, message) pairs matching any of the binding keys."""
    connection = connect(url)
    channel = connection.channel()
    channel.exchange_declare(exchange=exchange, exchange_type="topic")
    result = channel.queue_declare(queue="", exclusive=True)
    queue_name = result.method.queue
    listener.queue = queue_name
    for binding_key in binding_keys:
        channel.queue_bind(exchange=exchange, queue=queue_name, routing_key=binding_key)

    def callback(
        ch: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes
    ) -> None:
        print(f" [x] {method.routing_key}:{body!r}")
        listener.messages.append((method.routing_key, body.decode()))

    channel.basic_consume(queue=queue_name, on_message_callback=callback, auto_ack=True)
    print(" [*] Waiting for logs.")
    consume_until_done(connection, listener, timeout)
    connection.close()
