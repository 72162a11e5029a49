"""Durability over real sockets: what survives a restart and what does not.

The embedded broker is stopped and started again on the same data directory; the
SIGKILL rounds are in test_crash_recovery.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from kanin.server import scheduler
from kanin.testing.embedded import EmbeddedBroker, running_broker

pytestmark = pytest.mark.kanin_only

PERSISTENT = 2


def channel_of(broker: EmbeddedBroker) -> tuple[pika.BlockingConnection, BlockingChannel]:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    return connection, connection.channel()


def test_persistent_messages_on_durable_queue_survive_with_properties(tmp_path: Path) -> None:
    properties = pika.BasicProperties(
        delivery_mode=PERSISTENT,
        content_type="application/json",
        correlation_id="c-1",
        headers={"attempt": 3, "tags": ["a", "b"], "nested": {"k": "v"}},
        priority=4,
        message_id="m-1",
        app_id="tests",
    )
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.queue_declare("keep", durable=True)
        channel.confirm_delivery()
        for index in range(50):
            channel.basic_publish("", "keep", b"body-%d" % index, properties)
        connection.close()
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        assert channel.queue_declare("keep", passive=True).method.message_count == 50
        for index in range(50):
            method, got, body = channel.basic_get("keep", auto_ack=True)
            assert method is not None and body == b"body-%d" % index
            assert got.delivery_mode == PERSISTENT and got.correlation_id == "c-1"
            assert got.content_type == "application/json" and got.priority == 4
            assert got.headers == {"attempt": 3, "tags": ["a", "b"], "nested": {"k": "v"}}
            # A clean stop knows nothing was delivered: not redelivered.
            assert method.redelivered is False
        connection.close()


def test_transient_messages_and_non_durable_things_are_gone(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.queue_declare("durable-q", durable=True)
        channel.queue_declare("transient-q", durable=False)
        channel.exchange_declare("transient-x", "fanout", durable=False)
        channel.basic_publish("", "durable-q", b"transient", pika.BasicProperties(delivery_mode=1))
        channel.basic_publish("", "transient-q", b"p", pika.BasicProperties(delivery_mode=2))
        connection.close()
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        assert channel.queue_declare("durable-q", passive=True).method.message_count == 0
        for name, declare in (
            ("transient-q", lambda ch: ch.queue_declare("transient-q", passive=True)),
            ("transient-x", lambda ch: ch.exchange_declare("transient-x", passive=True)),
        ):
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
                declare(connection.channel())
            assert info.value.reply_code == 404, name
        connection.close()


def test_exclusive_durable_queue_does_not_survive(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.queue_declare("mine", durable=True, exclusive=True)
        channel.basic_publish("", "mine", b"x", pika.BasicProperties(delivery_mode=2))
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.queue_declare("mine", passive=True)
        assert info.value.reply_code == 404
        connection.close()


def test_durable_topology_survives_and_routes(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.exchange_declare("orders", "topic", durable=True)
        channel.exchange_declare("fan", "fanout", durable=True)
        channel.exchange_bind("fan", "orders", "eu.#")
        channel.queue_declare("eu-orders", durable=True, arguments={"x-max-priority": 5})
        channel.queue_bind("eu-orders", "fan")
        connection.close()
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.confirm_delivery()
        channel.basic_publish("orders", "eu.de", b"routed", pika.BasicProperties(delivery_mode=2))
        assert channel.basic_get("eu-orders", auto_ack=True)[2] == b"routed"
        # Arguments came back too: redeclaring without them is inequivalent.
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            connection.channel().queue_declare("eu-orders", durable=True)
        assert info.value.reply_code == 406
        connection.close()


def test_acked_messages_do_not_come_back_and_unacked_do(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.queue_declare("work", durable=True)
        channel.confirm_delivery()
        for index in range(10):
            channel.basic_publish("", "work", b"%d" % index, pika.BasicProperties(delivery_mode=2))
        for _ in range(4):
            method, _, _ = channel.basic_get("work")
            channel.basic_ack(method.delivery_tag)
        _, _, held_body = channel.basic_get("work")  # delivered, never acked
        assert held_body == b"4"
        channel.queue_declare("work", passive=True)  # a round trip: the acks were processed
        connection.close()
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        bodies = []
        while (got := channel.basic_get("work", auto_ack=True))[0] is not None:
            bodies.append((got[2], got[0].redelivered))
        assert bodies[0] == (b"4", True)  # requeued at close, then persisted as delivered
        assert [body for body, _ in bodies] == [b"%d" % i for i in range(4, 10)]
        connection.close()


def test_recovered_messages_keep_their_expiry_and_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in RabbitMQ, a message's expiry is a point in time stored with it: one that expired
    while the broker was down is dead-lettered at start, the others keep their time. The
    restart happens two minutes later by the wall clock kanin reads."""
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.queue_declare("dead", durable=True)
        arguments = {"x-max-priority": 9, "x-dead-letter-exchange": ""}
        arguments["x-dead-letter-routing-key"] = "dead"
        channel.queue_declare("timed", durable=True, arguments=arguments)
        channel.confirm_delivery()
        for body, expiration, priority in (
            (b"in-a-minute", "60000", 0),
            (b"in-an-hour-low", "3600000", 1),
            (b"never-high", None, 8),
        ):
            properties = pika.BasicProperties(
                delivery_mode=PERSISTENT, expiration=expiration, priority=priority
            )
            channel.basic_publish("", "timed", body, properties)
        connection.close()
    real_clock = scheduler.wall_clock_s

    def later() -> float:  # two minutes after the messages were stored
        return real_clock() + 120.0

    monkeypatch.setattr(scheduler, "wall_clock_s", later)
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        got = [channel.basic_get("timed", auto_ack=True)[2] for _ in range(2)]
        assert got == [b"never-high", b"in-an-hour-low"]
        # Expired behind live ones, it goes when it reaches the head, as RabbitMQ does.
        assert channel.basic_get("timed", auto_ack=True)[0] is None
        # It was paged out: dead-lettering reads it back first, off the loop, so it reaches
        # the dead-letter queue a moment after the get that found it expired.
        deadline = time.monotonic() + 5
        while (got_dead := channel.basic_get("dead", auto_ack=True))[0] is None:
            assert time.monotonic() < deadline, "the expired message was not dead-lettered"
            time.sleep(0.01)
        _, properties, body = got_dead
        assert body == b"in-a-minute" and properties.headers["x-death"][0]["reason"] == "expired"
        connection.close()


def test_confirm_comes_after_the_record_is_on_disk(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.queue_declare("disk", durable=True)
        channel.confirm_delivery()
        channel.basic_publish("", "disk", b"on-disk-marker", pika.BasicProperties(delivery_mode=2))
        # The confirm arrived: the record must already be in a segment file.
        segments = sorted((tmp_path / "messages").glob("*.log"))
        assert any(b"on-disk-marker" in path.read_bytes() for path in segments)
        connection.close()


def test_a_lone_confirmed_publish_waits_for_one_commit_round_not_two(tmp_path: Path) -> None:
    """The channel hands its confirm to the store in the same turn as the publish, so
    the round that writes the record also releases the confirm."""
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.queue_declare("lone", durable=True)
        channel.confirm_delivery()
        for index in range(5):
            rounds_before = broker.call(lambda: broker.server.store.committer.rounds)  # type: ignore[union-attr]
            channel.basic_publish("", "lone", b"%d" % index, pika.BasicProperties(delivery_mode=2))
            rounds = broker.call(lambda: broker.server.store.committer.rounds) - rounds_before  # type: ignore[union-attr]
            assert rounds == 1, f"publish {index} was confirmed after {rounds} commit rounds"
        connection.close()


def test_publishes_are_group_committed(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        channel.queue_declare("batch", durable=True)
        rounds_before = broker.call(lambda: broker.server.store.committer.rounds)  # type: ignore[union-attr]
        for index in range(500):  # no confirms: pika pipelines them in few writes
            channel.basic_publish("", "batch", b"%d" % index, pika.BasicProperties(delivery_mode=2))
        channel.confirm_delivery()
        channel.basic_publish("", "batch", b"last", pika.BasicProperties(delivery_mode=2))
        rounds = broker.call(lambda: broker.server.store.committer.rounds) - rounds_before  # type: ignore[union-attr]
        # Fewer fsync rounds than messages, by a wide margin: batches grow with load. (How
        # many depends on how the bytes arrive, so only the group-commit property is pinned.)
        assert 1 <= rounds <= 501 // 2, f"{rounds} commit rounds for 501 publishes"
        assert channel.queue_declare("batch", passive=True).method.message_count == 501
        connection.close()


def test_a_message_taken_at_once_without_ack_is_never_written(tmp_path: Path) -> None:
    """Delivered the moment it arrives to a consumer that does not ack, a persistent
    message has left the queue for good: it is confirmed without a record on disk. One
    delivered to a consumer that acks is written (it may come back)."""
    with running_broker(data_dir=tmp_path) as broker:
        connection, channel = channel_of(broker)
        for queue in ("auto", "manual"):
            channel.queue_declare(queue, durable=True)
        got: list[bytes] = []
        channel.basic_consume("auto", lambda _c, _m, _p, body: got.append(body), auto_ack=True)
        channel.basic_consume("manual", lambda _c, _m, _p, body: got.append(body))
        channel.confirm_delivery()
        persistent = pika.BasicProperties(delivery_mode=2)
        channel.basic_publish("", "auto", b"taken-without-ack", persistent)
        channel.basic_publish("", "manual", b"taken-with-ack", persistent)
        while len(got) < 2:
            connection.process_data_events(time_limit=0.1)
        on_disk = b"".join(path.read_bytes() for path in (tmp_path / "messages").glob("*.log"))
        assert sorted(got) == [b"taken-with-ack", b"taken-without-ack"]
        assert b"taken-with-ack" in on_disk and b"taken-without-ack" not in on_disk
        # Not even queued for a round and taken back (withdrawn): never handed to the store.
        assert broker.call(lambda: broker.server.store.committer.withdrawn) == 0  # type: ignore[union-attr]
        connection.close()
