"""A broker core without sockets, for tests of consuming (tests/unit/test_dispatch_*.py):
a real Broker on a FakeScheduler, channels on a fake connection with the services a
session would give them, methods sent as pamqp commands, and every delivery recorded
as (consumer tag, body). `Core(deep=True)` gives the broker a store
(paging_harness.CountingStore) and a memory budget of 0 per queue, so persistent
messages of durable queues are paged out and read back.

Import it like helpers (tests/ is on sys.path): `from core_harness import Core`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from pamqp import commands

from kanin.amqp.assembler import AssemblyLimit
from kanin.amqp.tables import encode_header
from kanin.config import BrokerConfig
from kanin.core.broker import Broker
from kanin.core.channel import Channel
from kanin.core.consumer import Consumer
from kanin.core.dispatch import DispatchRing
from kanin.core.message import Entry, Message
from kanin.core.ports import ChannelServices
from kanin.core.queues import Queue
from kanin.testing.clock import FakeScheduler
from paging_harness import CountingStore

T = TypeVar("T", bound=Hashable)


def take_turn(
    ring: DispatchRing[T], can_take: Callable[[T], bool], set_aside: Callable[[T], None]
) -> T | None:
    """The member of `ring` whose turn it is among those that can take a message, asked
    the way ConsumerChoice.pick asks the queue's ring: `current`, then `served` if it can
    take one, else `disable` it, hand it to `set_aside` (whoever enables it again once it
    can) and ask the next. None if no enabled member can."""
    while (item := ring.current()) is not None:
        if can_take(item):
            ring.served(item)
            return item
        ring.disable(item)
        set_aside(item)
    return None


class FakePort:
    """What a channel needs from its connection (a ConnectionPort); `writable` can be
    switched by a test."""

    def __init__(self, max_message_bytes: int) -> None:
        self.frame_max = 131072
        self.client_capabilities: dict[str, Any] = {"consumer_cancel_notify": True}
        self.exclusive_queues: set[Queue] = set()
        # As a connection's: two maximum-size messages in assembly across its channels.
        self.assembly_limit = AssemblyLimit(2 * max_message_bytes)
        self.writable = True
        self.channels: list[Channel] = []
        self.sent = 0
        self.name = "fake-client -> fake-broker"

    def send(self, data: bytes) -> None:
        self.sent += 1

    def send_parts(self, parts: list[bytes]) -> None:
        self.sent += 1

    def request_flush(self, channel: Channel) -> None:
        pass

    def request_flush_next_turn(self, channel: Channel) -> None:
        pass

    def hold_until_saved(self) -> None:
        pass  # nothing is saved: the broker keeps no definitions on disk here

    def hold_input(self) -> Callable[[], None]:
        """No input to hold here: the test sends each method itself."""
        return lambda: None

    def resume_writing(self) -> None:
        """As the server's connection does when its socket drains."""
        self.writable = True
        for channel in self.channels:
            channel.wake()


class RecordingChannel(Channel):
    """A channel that notes every delivery in its Core's log."""

    def __init__(
        self,
        channel_id: int,
        port: FakePort,
        services: ChannelServices,
        log: list[tuple[str, bytes]],
    ) -> None:
        super().__init__(channel_id, port, services)
        self.log = log

    def deliver(self, consumer: Consumer, entry: Entry) -> None:
        assert entry.message is not None
        self.log.append((consumer.tag, entry.message.body))
        super().deliver(consumer, entry)


class Core:
    """One broker, one connection; `run()` runs everything the broker scheduled."""

    def __init__(self, deep: bool = False, clock: FakeScheduler | None = None) -> None:
        self.clock = clock if clock is not None else FakeScheduler()
        self.store = CountingStore(self.clock) if deep else None
        config = BrokerConfig(queue_memory_budget_bytes=0) if deep else BrokerConfig()
        self.broker = Broker(config, self.clock, self.store)
        limit = self.broker.config.max_message_size_bytes
        self.port = FakePort(limit)
        self.vhost = self.broker.vhosts["/"]
        # What the session hands its channels once guest has opened vhost "/".
        self.services = ChannelServices(
            vhost=self.vhost,
            user=self.broker.users.users["guest"],
            store=self.broker.store,
            replies=self.broker.replies,
            max_message_bytes=limit,
        )
        self.deliveries: list[tuple[str, bytes]] = []

    def run(self) -> None:
        self.clock.run_soon()

    def declare(self, name: str, durable: bool = False, **arguments: Any) -> Queue:
        return self.vhost.declare_queue(
            name,
            self.port,
            passive=False,
            durable=durable,
            exclusive=False,
            auto_delete=False,
            arguments=arguments,
        )

    def channel(self, prefetch: int = 0, global_prefetch: int = 0) -> RecordingChannel:
        channel = RecordingChannel(
            len(self.port.channels) + 1, self.port, self.services, self.deliveries
        )
        self.port.channels.append(channel)
        if prefetch:
            channel.handle_method(commands.Basic.Qos(prefetch_count=prefetch))
        if global_prefetch:
            channel.handle_method(commands.Basic.Qos(prefetch_count=global_prefetch, global_=True))
        return channel

    def consume(
        self,
        channel: Channel,
        queue: str,
        tag: str,
        priority: int | None = None,
        no_ack: bool = False,
        exclusive: bool = False,
    ) -> Consumer:
        arguments = {} if priority is None else {"x-priority": priority}
        channel.handle_method(
            commands.Basic.Consume(
                queue=queue,
                consumer_tag=tag,
                no_ack=no_ack,
                exclusive=exclusive,
                arguments=arguments,
                nowait=True,
            )
        )
        return channel.consumers[tag]

    def publish(self, queue: str, *bodies: bytes, persistent: bool = False) -> None:
        target = self.vhost.queues[queue]
        properties = commands.Basic.Properties(delivery_mode=2 if persistent else None)
        for body in bodies:
            header = encode_header(len(body), properties) if persistent else b""
            target.publish(Message("", queue, header, body, properties, None))

    def take_deliveries(self) -> list[tuple[str, bytes]]:
        """Run the broker, then return (and forget) what was delivered meanwhile."""
        self.run()
        got, self.deliveries[:] = list(self.deliveries), []
        return got


def ack_all(channel: Channel) -> None:
    channel.handle_method(commands.Basic.Ack(delivery_tag=0, multiple=True))


def cancel(channel: Channel, tag: str) -> None:
    channel.handle_method(commands.Basic.Cancel(consumer_tag=tag, nowait=True))
