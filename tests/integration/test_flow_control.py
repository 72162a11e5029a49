"""Flow control: above the memory watermark publishers are blocked, not killed
(https://www.rabbitmq.com/memory.html, https://www.rabbitmq.com/connection-blocked.html).

kanin's watermark counts what queued messages cost (ready or unacked: body, header and a
fixed overhead each) and unfinished bodies; an embedded broker goes by that count alone (a
real one watches its resident memory too), so a small watermark makes the alarm
deterministic in a test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pika
import pytest
from pamqp import body, commands, frame, header

from helpers import BrokerFactory, raw_client

pytestmark = pytest.mark.kanin_only

WATERMARK = 64 * 1024
BODY = b"x" * 1024


def params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", port, blocked_connection_timeout=None)


def test_publisher_is_blocked_above_watermark_and_unblocked_after_drain(
    broker_factory: BrokerFactory, unique: Callable[[str], str]
) -> None:
    queue = unique("flow")
    with broker_factory(memory_high_watermark_bytes=WATERMARK) as broker:
        publisher = pika.BlockingConnection(params(broker.port))
        events: list[str] = []
        publisher.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
        publisher.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
        channel = publisher.channel()
        channel.queue_declare(queue)
        # No confirms here: a blocking confirm would wait on the very socket kanin stopped reading.
        # Fill past the watermark: 70 KiB of bodies against a 64 KiB watermark.
        for _ in range(70):
            channel.basic_publish("", queue, BODY)
        deadline = time.monotonic() + 5
        while "blocked" not in events and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.1)
        assert events == ["blocked"]
        assert broker.call(lambda: broker.server.broker.memory.alarm) is True

        # Another connection is still served: a consumer drains the queue with acks.
        consumer = pika.BlockingConnection(params(broker.port))
        drain = consumer.channel()
        drained = 0
        while drained < 70:
            method, _, body = drain.basic_get(queue)
            if method is None:
                break
            assert body == BODY
            drain.basic_ack(method.delivery_tag)
            drained += 1
        assert drained == 70

        deadline = time.monotonic() + 5
        while events[-1] != "unblocked" and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.1)
        # The publishes still in the socket when reading stopped are read after the first
        # unblock and may cross the watermark again: blocks and unblocks alternate.
        assert events[-1] == "unblocked"
        assert events == ["blocked", "unblocked"] * (len(events) // 2)
        # The publisher's connection is read again: a new publish is confirmed.
        channel.confirm_delivery()
        channel.basic_publish("", queue, b"after")
        assert drain.basic_get(queue, auto_ack=True)[2] == b"after"
        consumer.close()
        publisher.close()


def test_blocked_publisher_loses_nothing(
    broker_factory: BrokerFactory, unique: Callable[[str], str]
) -> None:
    """Publishes sent while blocked are held in the socket, then all arrive."""
    queue = unique("flowall")
    total = 200
    with broker_factory(memory_high_watermark_bytes=WATERMARK) as broker:
        setup = pika.BlockingConnection(params(broker.port))
        setup.channel().queue_declare(queue)

        def publish_all() -> None:
            connection = pika.BlockingConnection(params(broker.port))
            channel = connection.channel()
            for index in range(total):
                channel.basic_publish("", queue, BODY[:-4] + index.to_bytes(4, "big"))
            connection.process_data_events(time_limit=0.5)
            connection.close()

        publishing = threading.Thread(target=publish_all)
        publishing.start()
        channel = setup.channel()
        seen: set[int] = set()
        deadline = time.monotonic() + 20
        while len(seen) < total and time.monotonic() < deadline:
            method, _, body = channel.basic_get(queue)
            if method is None:
                setup.process_data_events(time_limit=0.02)
                continue
            seen.add(int.from_bytes(body[-4:], "big"))
            channel.basic_ack(method.delivery_tag)
        publishing.join(timeout=20)
        assert not publishing.is_alive()
        assert seen == set(range(total))
        setup.close()


def test_disk_alarm_blocks_publishers_with_its_reason(
    broker_factory: BrokerFactory, unique: Callable[[str], str]
) -> None:
    queue = unique("disk")
    # A free-disk limit no disk can meet: the alarm is raised from the start.
    with broker_factory(disk_free_limit_bytes=10**18) as broker:
        publisher = pika.BlockingConnection(params(broker.port))
        reasons: list[str] = []
        publisher.add_on_connection_blocked_callback(
            lambda _conn, frame: reasons.append(frame.method.reason)
        )
        channel = publisher.channel()
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"first")
        deadline = time.monotonic() + 5
        while not reasons and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.1)
        assert reasons == ["low on disk"]
        # Reading stopped at the publish. Whether its content was in the same read (accepted)
        # or is still waiting in the socket depends on how TCP cut the bytes; either way other
        # connections are still served.
        consumer = pika.BlockingConnection(params(broker.port))
        consumer_channel = consumer.channel()
        assert consumer_channel.queue_declare(queue, passive=True).method.message_count in (0, 1)
        # Lowering the limit clears the alarm and the publisher is read again.
        monitor = broker.server.disk
        assert monitor is not None
        broker.call(lambda: setattr(monitor, "limit_bytes", 0))
        unblocked: list[bool] = []
        publisher.add_on_connection_unblocked_callback(lambda *_: unblocked.append(True))
        deadline = time.monotonic() + 8
        while not unblocked and time.monotonic() < deadline:
            publisher.process_data_events(time_limit=0.1)
        assert unblocked == [True]
        deadline = time.monotonic() + 5
        got = None
        while got is None and time.monotonic() < deadline:
            got = consumer_channel.basic_get(queue, auto_ack=True)[2]
        assert got == b"first"  # nothing was lost while blocked
        assert consumer_channel.queue_declare(queue, passive=True).method.message_count == 0
        consumer.close()
        publisher.close()


def test_unfinished_bodies_past_the_connection_bound_close_it(
    broker_factory: BrokerFactory, unique: Callable[[str], str]
) -> None:
    """The channels of one connection may hold twice the max message size of unfinished
    bodies together; past that the connection is closed with 506 RESOURCE_ERROR."""
    queue = unique("unfinished")
    with broker_factory(max_message_size_bytes=64 * 1024) as broker:
        client = raw_client(broker)
        client.handshake()
        announced = 60 * 1024
        for number in (1, 2, 3):
            client.open_channel(number)
            client.send_frame(number, commands.Basic.Publish(routing_key=queue))
            client.send_frame(
                number, header.ContentHeader(0, announced, commands.Basic.Properties())
            )
        part = b"x" * (50 * 1024)
        # 100 KB unfinished on channels 1 and 2: within the 128 KB bound.
        client.send_raw(frame.marshal(body.ContentBody(part), 1))
        client.send_raw(frame.marshal(body.ContentBody(part), 2))
        client.open_channel(4)  # the broker has read them, and still answers
        client.send_raw(frame.marshal(body.ContentBody(part), 3))  # 150 KB: past it
        close = client.expect_connection_close()
        assert close.reply_code == 506
        assert close.reply_text == (
            "RESOURCE_ERROR - unfinished messages on this connection would hold 153600 bytes, "
            "more than the limit of 131072"
        )
        assert client.wait_closed()
        client.close()
        memory = broker.server.broker.memory
        assert broker.call(lambda: memory.held_bytes) == 0  # their bytes were given back


def test_a_blocked_publisher_is_not_dropped_for_heartbeats_it_cannot_send(
    broker_factory: BrokerFactory, unique: Callable[[str], str]
) -> None:
    """While blocked its socket is not read, so its heartbeats go unseen: that is not a
    dead peer (RabbitMQ pauses its heartbeat monitor for blocked connections)."""
    queue = unique("heartbeat")
    with broker_factory(memory_high_watermark_bytes=WATERMARK) as broker:
        client = raw_client(broker)
        client.handshake(
            heartbeat=1,
            client_properties={"capabilities": {"connection.blocked": True}},
        )
        client.open_channel(1)
        client.rpc(1, commands.Queue.Declare(queue=queue), commands.Queue.DeclareOk)
        for _ in range(70):
            client.publish(1, BODY, routing_key=queue)
        client.expect(commands.Connection.Blocked, 0)
        # Three heartbeat intervals: a peer silent for two is dead, were it being read.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            client.send_heartbeat()
            time.sleep(0.2)
        drain = pika.BlockingConnection(params(broker.port))
        drain.channel().queue_purge(queue)
        drain.close()
        client.expect(commands.Connection.Unblocked, 0)
        client.rpc(1, commands.Queue.Declare(queue=queue, passive=True), commands.Queue.DeclareOk)
        client.close()
