"""One connection's work must not hold the others up: the broker's event loop serves every
connection in turn, however much one of them has to do."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pamqp import commands, frame, header

from rawamqp import RawClient

QUEUE = "deep-fairness"
MESSAGES = 200_000
PER_WRITE = 10_000


def client(port: int) -> RawClient:
    raw = RawClient.connect("127.0.0.1", port)
    raw.handshake()
    raw.open_channel(1)
    return raw


def ready_count(raw: RawClient) -> int:
    declare = commands.Queue.Declare(queue=QUEUE, passive=True)
    return int(raw.rpc(1, declare, commands.Queue.DeclareOk).message_count)


@contextmanager
def reading_everything(raw: RawClient) -> Iterator[None]:
    """A consumer as fast as a socket: what arrives is read and dropped, on a thread."""
    stop = threading.Event()
    raw.sock.settimeout(0.2)

    def read() -> None:
        while not stop.is_set():
            try:
                if not raw.sock.recv(1 << 20):
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield
    finally:
        stop.set()
        reader.join(5)


def test_a_deep_queue_draining_to_a_fast_consumer_holds_no_other_connection_up(
    broker: Any,
) -> None:
    """The queue hands out a batch per loop turn and leaves the rest for the next one, so a
    connection opened while 200,000 messages drain to a no-ack consumer is answered while
    some are still there. (When the whole queue went out in one turn, that connection's
    connection.start came only once the queue was empty: seconds, on a busy machine more
    than a client's connect timeout.) How many are left depends on how fast the broker
    drains against how fast this client's round trips go, so only "not empty" is asked."""
    publisher = client(broker.port)
    publisher.rpc(1, commands.Queue.Declare(queue=QUEUE), commands.Queue.DeclareOk)
    one = frame.marshal(commands.Basic.Publish(routing_key=QUEUE), 1) + frame.marshal(
        header.ContentHeader(0, 0, commands.Basic.Properties()), 1
    )
    for _ in range(MESSAGES // PER_WRITE):
        publisher.sock.sendall(one * PER_WRITE)
    while ready_count(publisher) < MESSAGES:  # the publishes are in order: all arrive
        pass
    consumer = client(broker.port)
    consumer.send_method(1, commands.Basic.Consume(queue=QUEUE, no_ack=True))
    with reading_everything(consumer):
        newcomer = client(broker.port)  # handshake, channel.open: several round trips
        assert ready_count(newcomer) > 0
        newcomer.close()
        while ready_count(publisher) > 0:  # and the queue does drain
            pass
    consumer.close()
    publisher.close()
