"""Tutorial 4, "Routing": emit_log_direct publishes each log line to the direct exchange
'direct_logs' with its severity as routing key; receive_logs_direct binds one queue once per
severity it cares about, and only gets those.
"""

from __future__ import annotations

from collections.abc import Iterable

from pika import BasicProperties
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic

from ._common import Listener, connect, consume_until_done


def emit_log_direct(
    url: str, logs: Iterable[tuple[str, str]], exchange: str = "direct_logs"
) -> None:
    """Publish (severity, message) pairs."""
    connection = connect(url)
    channel = connection.channel()
    channel.exchange_declare(exchange=exchange, exchange_type="direct")
    for severity, message in logs:
        channel.basic_publish(exchange=exchange, routing_key=severity, body=message)
        print(f" [x] Sent {severity}:{message}")
    connection.close()


def receive_logs_direct(
    url: str,
    listener: Listener,
    severities: Iterable[str],
    exchange: str = "direct_logs",
    timeout: float = 10.0,
) -> None:
    """Record (severity, message) pairs for the chosen severities."""
    connection = connect(url)
    channel = connection.channel()
    channel.exchange_declare(exchange=exchange, exchange_type="direct")
    result = channel.queue_declare(queue="", exclusive=True)
    queue_name = result.method.queue
    listener.queue = queue_name
    for severity in severities:
        channel.queue_bind(exchange=exchange, queue=queue_name, routing_key=severity)

    def callback(
        ch: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes
    ) -> None:
        print(f" [x] {method.routing_key}:{body!r}")
        listener.messages.append((method.routing_key, body.decode()))

    channel.basic_consume(queue=queue_name, on_message_callback=callback, auto_ack=True)
    print(" [*] Waiting for logs.")
    consume_until_done(connection, listener, timeout)
    connection.close()
