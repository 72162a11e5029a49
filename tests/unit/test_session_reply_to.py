"""Direct reply-to through a session, socket-free: the services a session hands its
channels, and a request and its reply between two channels of one connection."""

from __future__ import annotations

import pytest
from pamqp import body, commands, frame, header

from kanin.core.reply_to import REPLY_TO
from kanin.testing.session_pair import SessionPair


@pytest.fixture
def pair() -> SessionPair:
    opened = SessionPair()
    opened.handshake()
    opened.open_channel(1)  # the requester
    opened.open_channel(2)  # the responder
    return opened


def publish(pair: SessionPair, channel: int, routing_key: str, reply_to: str = "") -> None:
    method = commands.Basic.Publish(exchange="", routing_key=routing_key)
    properties = commands.Basic.Properties(reply_to=reply_to or None)
    content = header.ContentHeader(0, 3, properties)
    pair.send(
        frame.marshal(method, channel)
        + frame.marshal(content, channel)
        + frame.marshal(body.ContentBody(b"msg"), channel)
    )


def request(pair: SessionPair) -> str:
    """Consume the pseudo-queue on 1, send a request from 1 for 2 to fetch: its reply_to."""
    pair.send_method(1, commands.Basic.Consume(queue=REPLY_TO, consumer_tag="rpc", no_ack=True))
    assert isinstance(pair.expect(1), commands.Basic.ConsumeOk)
    pair.send_method(2, commands.Queue.Declare(queue="requests"))
    assert isinstance(pair.expect(2), commands.Queue.DeclareOk)
    publish(pair, 1, "requests", reply_to=REPLY_TO)
    pair.send_method(2, commands.Basic.Get(queue="requests", no_ack=True))
    [(_, get_ok), (_, content), _] = pair.frames()
    assert isinstance(get_ok, commands.Basic.GetOk)
    return str(content.properties.reply_to)


def test_the_channels_of_a_connection_share_what_the_session_gave_them(
    pair: SessionPair,
) -> None:
    first, second = pair.session.channels[1], pair.session.channels[2]
    assert first.services is second.services
    services = first.services
    assert services.vhost is pair.broker.vhosts["/"] is first.vhost
    assert services.user.name == "guest"
    assert services.replies is pair.broker.replies
    assert services.max_message_bytes == pair.broker.config.max_message_size_bytes


def test_a_reply_reaches_the_requester_until_its_channel_closes(pair: SessionPair) -> None:
    address = request(pair)
    assert address.startswith(REPLY_TO + ".")
    publish(pair, 2, address)
    [(number, deliver), _, (_, data)] = pair.frames()
    assert number == 1 and isinstance(deliver, commands.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.routing_key, data.value) == ("rpc", address, b"msg")
    pair.send_method(
        1, commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    assert isinstance(pair.expect(1), commands.Channel.CloseOk)
    assert len(pair.broker.replies) == 0
    publish(pair, 2, address)  # the requester is gone: routed nowhere, and silently
    assert pair.frames() == []
