"""Direct reply-to (RabbitMQ's amq.rabbitmq.reply-to): RPC replies without a reply queue.

Rules of this file (the whole feature: the channel and its handlers only call it):
- A requester consumes the pseudo-queue `amq.rabbitmq.reply-to`, with no-ack and at most
  one such consumer per channel. The consumer gets an address of RabbitMQ's shape,
  `amq.rabbitmq.reply-to.<part>.<part>`, kept in a registry the whole broker shares,
  since replies come from other connections.
- A publish whose reply_to is exactly the pseudo-queue's name has it rewritten to the
  address of its channel's reply consumer; without one the publish is refused with 406.
- A publish through the default exchange with an address as routing key goes straight
  to that consumer: no queue, no ack. An address whose consumer is gone (cancelled,
  channel closed) routes nowhere, so the publish is unroutable like any other.
- queue.declare of the pseudo-queue, or a passive one of a live address, answers as if
  the queue had one consumer and no messages, as RabbitMQ 3.10 does.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError
from kanin.amqp.methods import build

if TYPE_CHECKING:
    from kanin.core.channel import Channel
    from kanin.core.message import Message

REPLY_TO = "amq.rabbitmq.reply-to"
_PREFIX = REPLY_TO + "."


def new_key() -> str:
    """The part of a reply address after `amq.rabbitmq.reply-to.`, in RabbitMQ's shape:
    two standard-base64 parts joined by a dot. RabbitMQ encodes the requester channel's
    process id (40 characters) and a 16-byte random key; some clients split the name on its
    dots. kanin routes a reply by looking the whole suffix up, so both parts are random: the
    first stands for the channel, the second is the key that makes the name unguessable."""
    channel_part = base64.b64encode(secrets.token_bytes(30)).decode()
    key_part = base64.b64encode(secrets.token_bytes(16)).decode()
    return f"{channel_part}.{key_part}"


def is_pseudo_queue(name: str | None) -> bool:
    return name == REPLY_TO


def is_addressed(exchange: str, routing_key: str) -> bool:
    """A publish to a reply address: only the default exchange knows them, as in RabbitMQ."""
    return exchange == "" and routing_key.startswith(_PREFIX)


def address_of(channel: Channel) -> str:
    """The reply_to a request published on this channel carries instead of the pseudo-queue."""
    if channel.reply is None:
        raise ChannelError(C.PRECONDITION_FAILED, "fast reply consumer does not exist")
    return channel.reply.address


@dataclass(frozen=True, eq=False)
class ReplyConsumer:
    """A channel's consumer of the pseudo-queue: the key of its address, and its tag."""

    key: str
    tag: str
    channel: Channel

    @property
    def address(self) -> str:
        return _PREFIX + self.key

    def deliver(self, message: Message) -> None:
        # RabbitMQ 3.10 stamps a reply with the channel's next tag without using it up.
        channel = self.channel
        method = build(
            commands.Basic.Deliver,
            consumer_tag=self.tag,
            delivery_tag=channel.unacked.peek_tag(),
            redelivered=False,
            exchange=message.exchange,
            routing_key=message.routing_key,
        )
        channel.send_content(method, message)


class ReplyRegistry:
    """The live reply consumers of the whole broker, by the key in their address."""

    def __init__(self) -> None:
        self._consumers: dict[str, ReplyConsumer] = {}

    def __len__(self) -> int:
        return len(self._consumers)

    @staticmethod
    def check_consume(channel: Channel, no_ack: bool) -> None:
        """basic.consume of the pseudo-queue, checked before its consumer tag is."""
        if not no_ack:
            raise ChannelError(C.PRECONDITION_FAILED, "reply consumer cannot acknowledge")
        if channel.reply is not None:
            raise ChannelError(C.PRECONDITION_FAILED, "reply consumer already set")

    def consume(self, channel: Channel, tag: str) -> ReplyConsumer:
        """Give the channel its reply consumer (check_consume said it may have one)."""
        assert channel.reply is None
        consumer = ReplyConsumer(new_key(), tag, channel)
        self._consumers[consumer.key] = consumer
        channel.reply = consumer
        return consumer

    def cancel(self, channel: Channel) -> None:
        """The channel's reply consumer, if any, is gone: its address routes nowhere now."""
        consumer = channel.reply
        if consumer is not None:
            self._consumers.pop(consumer.key, None)
            channel.reply = None

    def deliver(self, message: Message) -> bool:
        """A publish to a reply address (see is_addressed): False if nobody consumes there."""
        consumer = self._consumers.get(message.routing_key[len(_PREFIX) :])
        if consumer is None or consumer.channel.closing:
            return False
        consumer.deliver(message)
        return True

    def is_reply_name(self, name: str) -> bool:
        """The pseudo-queue itself, or the address of a live reply consumer."""
        if name == REPLY_TO:
            return True
        return name.startswith(_PREFIX) and name[len(_PREFIX) :] in self._consumers

    def declare_ok(self, name: str, passive: bool) -> commands.Queue.DeclareOk | None:
        """The answer to a queue.declare that names the pseudo-queue or, passively, a live
        address; None if the declare is an ordinary one."""
        if not (self.is_reply_name(name) and (passive or name == REPLY_TO)):
            return None
        # RabbitMQ 3.10 answers as if the pseudo-queue had one consumer.
        return build(commands.Queue.DeclareOk, queue=name, message_count=0, consumer_count=1)
