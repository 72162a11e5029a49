"""The per-message shortcuts of the publish path keep their answers: a write permission
checked once per channel and exchange is asked again once the user's permissions change,
and basic.publish decoded in place from the read buffer refuses what the copy refused."""

from __future__ import annotations

import pytest
from pamqp import commands, frame

from kanin.amqp import constants as C
from kanin.amqp.errors import ConnectionError_
from kanin.amqp.methods import decode_method, decode_publish_at
from kanin.core.auth import Permission
from kanin.testing.session_pair import SessionPair


def test_a_write_permission_taken_away_refuses_the_next_publish_on_an_open_channel() -> None:
    pair = SessionPair()
    pair.handshake()
    pair.open_channel(1)
    pair.send_method(1, commands.Queue.Declare(queue="q"))
    pair.frames()
    pair.publish(1, b"first", "q")
    assert pair.methods() == []  # accepted: no close
    pair.broker.users.set_permissions("guest", "/", Permission(".*", "^$", ".*"))
    pair.publish(1, b"second", "q")
    close = pair.expect(1)
    assert isinstance(close, commands.Channel.Close)
    assert close.reply_code == C.ACCESS_REFUSED
    assert "exchange 'amq.default'" in close.reply_text
    assert pair.broker.vhosts["/"].queues["q"].message_count == 1


def _publish_payload(exchange: str, routing_key: str, mandatory: bool) -> bytes:
    method = commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory)
    marshalled = frame.marshal(method, 1)
    return marshalled[7:-1]  # the method frame's payload


def test_a_publish_decoded_in_place_is_the_publish_decoded_from_a_copy() -> None:
    payload = _publish_payload("ex", "key.1", True)
    buffer = b"before" + payload + b"after"
    method = decode_publish_at(buffer, 6, 6 + len(payload))
    copied = decode_method(payload)
    fields = ("exchange", "routing_key", "mandatory", "immediate")
    in_place = tuple(getattr(method, name) for name in fields)
    assert in_place == tuple(getattr(copied, name) for name in fields)
    assert in_place == ("ex", "key.1", True, False)


@pytest.mark.parametrize("cut", [1, 3, 7])
def test_a_publish_whose_strings_run_past_its_end_is_refused_in_place_and_copied(cut: int) -> None:
    payload = _publish_payload("ex", "key.1", False)
    short = payload[:-cut]
    buffer = short + payload  # more bytes follow, as in a read buffer
    with pytest.raises(ValueError):
        decode_publish_at(buffer, 0, len(short))
    with pytest.raises(ConnectionError_) as refused:
        decode_method(short)
    assert refused.value.reply_code == C.FRAME_ERROR
