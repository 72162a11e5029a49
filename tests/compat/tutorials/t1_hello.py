"""Tutorial 1, "Hello World!": one program sends a message to queue 'hello', another prints it."""

from __future__ import annotations

from pika import BasicProperties
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic

from ._common import Listener, connect, consume_until_done


def send(url: str, queue: str = "hello", body: str = "Hello World!") -> None:
    connection = connect(url)
    channel = connection.channel()
    # Declaring is idempotent, so whichever program starts first creates the queue.
    channel.queue_declare(queue=queue)
    # The default exchange ('') routes by queue name.
    channel.basic_publish(exchange="", routing_key=queue, body=body)
    print(f" [x] Sent {body!r}")
    connection.close()


def receive(url: str, listener: Listener, queue: str = "hello", timeout: float = 10.0) -> None:
    connection = connect(url)
    channel = connection.channel()
    channel.queue_declare(queue=queue)

    def callback(
        ch: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes
    ) -> None:
        print(f" [x] Received {body!r}")
        listener.messages.append(body.decode())

    channel.basic_consume(queue=queue, on_message_callback=callback, auto_ack=True)
    print(" [*] Waiting for messages.")
    consume_until_done(connection, listener, timeout)
    connection.close()
