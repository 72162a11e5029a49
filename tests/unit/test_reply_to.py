"""Direct reply-to's rules on their own (core/reply_to.py): no socket, no session, no broker.

A registry is given stand-in channels that record what would have been sent; the
integration tests (tests/integration/test_direct_reply_to.py) check the same rules
through real clients.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from pamqp import commands

from kanin.amqp.errors import ChannelError
from kanin.core import reply_to
from kanin.core.message import Message
from kanin.core.reply_to import REPLY_TO, ReplyConsumer, ReplyRegistry
from kanin.core.unacked import UnackedLedger

# RabbitMQ 3.10's shape: two standard-base64 parts (its channel's process id, a 16-byte key).
REPLY_NAME = re.compile(
    r"^amq\.rabbitmq\.reply-to\.([A-Za-z0-9+/]+={0,2})\.([A-Za-z0-9+/]+={0,2})$"
)


@dataclass(eq=False)
class StandInChannel:
    """What the registry uses of a channel, recording the deliveries it is handed."""

    reply: ReplyConsumer | None = None
    closing: bool = False
    unacked: UnackedLedger = field(default_factory=UnackedLedger)
    sent: list[tuple[Any, bytes]] = field(default_factory=list)

    def send_content(self, method: Any, message: Message) -> None:
        self.sent.append((method, message.body))


def reply(address: str, body: bytes = b"reply") -> Message:
    return Message("", address, b"", body, commands.Basic.Properties())


def consuming(registry: ReplyRegistry, tag: str = "rpc") -> StandInChannel:
    channel = StandInChannel()
    registry.check_consume(channel, no_ack=True)
    registry.consume(channel, tag)
    return channel


def address(channel: StandInChannel) -> str:
    return reply_to.address_of(channel)


def test_addresses_have_rabbitmqs_shape_and_differ() -> None:
    registry = ReplyRegistry()
    names = [address(consuming(registry)) for _ in range(50)]
    assert len(set(names)) == len(names)
    for name in names:
        match = REPLY_NAME.fullmatch(name)
        assert match is not None, name
        assert len(base64.b64decode(match.group(1))) == 30  # stands for the channel
        assert len(base64.b64decode(match.group(2))) == 16  # the key, as RabbitMQ's
        assert registry.is_reply_name(name)


def test_a_reply_goes_to_its_addressee_only() -> None:
    registry = ReplyRegistry()
    alice, bob = consuming(registry, "a"), consuming(registry, "b")
    message = reply(address(bob))
    assert reply_to.is_addressed(message.exchange, message.routing_key)
    assert registry.deliver(message)
    assert alice.sent == []
    [(method, body)] = bob.sent
    assert isinstance(method, commands.Basic.Deliver)
    assert (method.consumer_tag, method.routing_key, body) == ("b", address(bob), b"reply")
    # RabbitMQ 3.10: the channel's next delivery tag, stamped without being used up.
    assert method.delivery_tag == 1 and bob.unacked.peek_tag() == 1


def test_an_address_routes_nowhere_once_its_consumer_is_gone() -> None:
    registry = ReplyRegistry()
    cancelled, closing = consuming(registry), consuming(registry)
    cancelled_name, closing_name = address(cancelled), address(closing)
    registry.cancel(cancelled)
    closing.closing = True
    assert cancelled.reply is None and len(registry) == 1
    assert not registry.deliver(reply(cancelled_name))
    assert not registry.deliver(reply(closing_name))
    assert not registry.deliver(reply(REPLY_TO + ".never.issued"))
    assert not registry.is_reply_name(cancelled_name)
    assert cancelled.sent == closing.sent == []


def test_only_the_default_exchange_knows_reply_addresses() -> None:
    name = REPLY_TO + ".a.b"
    assert reply_to.is_addressed("", name)
    assert not reply_to.is_addressed("amq.direct", name)
    assert not reply_to.is_addressed("", REPLY_TO)  # the pseudo-queue is not an address


def test_consuming_the_pseudo_queue_needs_no_ack_and_only_once_per_channel() -> None:
    registry = ReplyRegistry()
    with pytest.raises(ChannelError, match="reply consumer cannot acknowledge"):
        registry.check_consume(StandInChannel(), no_ack=False)
    channel = consuming(registry)
    with pytest.raises(ChannelError, match="reply consumer already set"):
        registry.check_consume(channel, no_ack=True)


def test_requests_claim_an_address_only_with_a_reply_consumer() -> None:
    with pytest.raises(ChannelError, match="fast reply consumer does not exist") as info:
        address(StandInChannel())
    assert info.value.reply_code == 406
    assert reply_to.is_pseudo_queue(REPLY_TO)
    assert not reply_to.is_pseudo_queue(REPLY_TO + ".mine")  # left as it is, as RabbitMQ does


def test_declares_of_reply_names_answer_as_one_consumer() -> None:
    registry = ReplyRegistry()
    live = address(consuming(registry))
    for name, passive in ((REPLY_TO, False), (REPLY_TO, True), (live, True)):
        ok = registry.declare_ok(name, passive)
        assert ok is not None
        assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 1)
    # An active declare of an address, or any declare of a dead one, is an ordinary declare.
    assert registry.declare_ok(live, passive=False) is None
    assert registry.declare_ok(REPLY_TO + ".gone.gone", passive=True) is None
    assert registry.declare_ok("plain", passive=True) is None
