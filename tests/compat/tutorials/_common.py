"""Bits shared by the tutorial programs: a record of what a consumer saw, and a bounded loop."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingConnection


@dataclass
class Listener:
    """What a consuming program saw, plus the events a test uses to steer it.

    `ready` is set once the program is subscribed (its consumer is registered), `stop` asks
    it to finish, and `expect` (if given) makes it finish by itself after that many messages.
    """

    expect: int | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    messages: list[Any] = field(default_factory=list)
    queue: str = ""

    def done(self) -> bool:
        if self.stop.is_set():
            return True
        return self.expect is not None and len(self.messages) >= self.expect


def connect(url: str) -> BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def consume_until_done(connection: BlockingConnection, listener: Listener, timeout: float) -> None:
    """Stand-in for `channel.start_consuming()`: dispatch deliveries until done or timed out."""
    listener.ready.set()
    deadline = time.monotonic() + timeout
    while not listener.done() and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
