"""Tutorial 2, "Work Queues": new_task publishes persistent tasks to the durable 'task_queue';
each worker takes one task at a time (prefetch_count=1), "works" one time unit per dot in the
body, then acknowledges it, so a busy worker gets no new task and a dead one loses none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import pika
from pika import BasicProperties
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic

from ._common import Listener, connect, consume_until_done


@dataclass(frozen=True)
class Task:
    worker: str
    body: str
    delivery_mode: int | None
    redelivered: bool


def new_task(url: str, messages: Iterable[str], queue: str = "task_queue") -> None:
    connection = connect(url)
    channel = connection.channel()
    channel.queue_declare(queue=queue, durable=True)
    for message in messages:
        channel.basic_publish(
            exchange="",
            routing_key=queue,
            body=message,
            properties=pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent),
        )
        print(f" [x] Sent {message!r}")
    connection.close()


def worker(
    url: str,
    listener: Listener,
    name: str,
    queue: str = "task_queue",
    dot_seconds: float = 1.0,
    prefetch_count: int | None = 1,
    die_before_ack: bool = False,
    timeout: float = 10.0,
) -> None:
    """Run one worker. `prefetch_count=None` leaves out basic.qos (the tutorial's first version).

    With `die_before_ack` the worker takes one task and then drops its connection without
    acknowledging it, as the tutorial's "kill a worker with CTRL+C" experiment does.
    """
    connection = connect(url)
    channel = connection.channel()
    channel.queue_declare(queue=queue, durable=True)
    died = threading.Event()

    def callback(
        ch: BlockingChannel, method: Basic.Deliver, properties: BasicProperties, body: bytes
    ) -> None:
        text = body.decode()
        print(f" [x] {name} received {text!r}")
        listener.messages.append(
            Task(name, text, properties.delivery_mode, bool(method.redelivered))
        )
        if die_before_ack:
            died.set()
            return
        time.sleep(text.count(".") * dot_seconds)
        print(f" [x] {name} done")
        ch.basic_ack(delivery_tag=method.delivery_tag)

    if prefetch_count is not None:
        channel.basic_qos(prefetch_count=prefetch_count)
    channel.basic_consume(queue=queue, on_message_callback=callback)
    print(f" [*] {name} waiting for messages.")
    if die_before_ack:
        listener.ready.set()
        deadline = time.monotonic() + timeout
        while not died.is_set() and not listener.stop.is_set() and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.05)
    else:
        consume_until_done(connection, listener, timeout)
    # Closing the connection with a task unacknowledged makes the broker requeue it.
    connection.close()
