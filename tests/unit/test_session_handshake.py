"""The opening of a session, socket-free: protocol header, credentials, handshake order."""

from __future__ import annotations

from pamqp import commands

from kanin.amqp import constants as C
from kanin.config import BrokerConfig
from kanin.core.session.state import State
from kanin.testing.session_pair import SessionPair


def test_a_good_handshake_opens_the_connection() -> None:
    pair = SessionPair()
    pair.handshake(frame_max=8192, heartbeat=0)
    assert pair.session.state is State.OPEN
    assert pair.session.frame_max == 8192
    assert pair.session in pair.broker.connections
    assert not pair.transport.closed


def test_tune_proposes_the_configured_limits() -> None:
    pair = SessionPair(BrokerConfig(channel_max=16, frame_max=8192, heartbeat_s=5))
    pair.send(C.PROTOCOL_HEADER)
    assert isinstance(pair.expect(0), commands.Connection.Start)
    pair.send_method(0, pair.start_ok("guest", "guest"))
    tune = pair.expect(0)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (16, 8192, 5)


def test_bad_credentials_close_the_socket_without_a_word_by_default() -> None:
    pair = SessionPair()
    pair.send(C.PROTOCOL_HEADER)
    pair.frames()
    pair.send_method(0, pair.start_ok("guest", "wrong"))
    assert pair.frames() == []
    assert pair.transport.closed
    assert pair.session.state is State.CLOSED


def test_bad_credentials_are_403_with_authentication_failure_close() -> None:
    pair = SessionPair()
    pair.send(C.PROTOCOL_HEADER)
    pair.frames()
    capabilities = {"authentication_failure_close": True}
    pair.send_method(0, pair.start_ok("guest", "wrong", capabilities))
    close = pair.expect(0)
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == C.ACCESS_REFUSED
    assert "PLAIN" in close.reply_text
    assert not pair.transport.closed  # waits for close-ok
    pair.send_method(0, commands.Connection.CloseOk())
    assert pair.transport.closed


def test_a_method_out_of_handshake_order_is_503() -> None:
    pair = SessionPair()
    pair.send(C.PROTOCOL_HEADER)
    pair.frames()
    pair.send_method(0, commands.Connection.Open(virtual_host="/"))
    close = pair.expect(0)
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (C.COMMAND_INVALID, 10, 40)
    assert pair.session.state is State.CLOSING


def test_a_channel_frame_during_the_handshake_is_505() -> None:
    pair = SessionPair()
    pair.send(C.PROTOCOL_HEADER)
    pair.frames()
    pair.send_method(1, commands.Channel.Open())
    close = pair.expect(0)
    assert close.reply_code == C.UNEXPECTED_FRAME


def test_an_unknown_vhost_is_530() -> None:
    pair = SessionPair()
    pair.send(C.PROTOCOL_HEADER)
    pair.frames()
    pair.send_method(0, pair.start_ok("guest", "guest"))
    pair.frames()
    pair.send_method(0, commands.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
    pair.send_method(0, commands.Connection.Open(virtual_host="nowhere"))
    close = pair.expect(0)
    assert close.reply_code == C.NOT_ALLOWED
    assert pair.session.state is State.CLOSING


def test_a_foreign_protocol_header_gets_ours_back_and_a_close() -> None:
    pair = SessionPair()
    pair.send(b"GET / HT")
    assert pair.frames() == [(0, C.PROTOCOL_HEADER)]
    assert pair.transport.closed


def test_a_header_is_refused_at_its_first_wrong_byte() -> None:
    pair = SessionPair()
    pair.send(b"AMQP\x00\x00\x08")  # not all 8 bytes yet, but already not ours
    assert pair.frames() == [(0, C.PROTOCOL_HEADER)]
    assert pair.transport.closed


def test_a_header_may_arrive_a_byte_at_a_time() -> None:
    pair = SessionPair()
    for byte in C.PROTOCOL_HEADER:
        pair.send(bytes([byte]))
    assert isinstance(pair.expect(0), commands.Connection.Start)


def test_the_0_9_protocol_header_is_accepted() -> None:
    pair = SessionPair()
    pair.send(b"AMQP\x01\x01\x00\x09")
    assert isinstance(pair.expect(0), commands.Connection.Start)
    assert pair.session.state is State.START_OK


def test_a_handshake_that_never_finishes_is_closed_on_time() -> None:
    config = BrokerConfig()
    pair = SessionPair(config)
    pair.send(C.PROTOCOL_HEADER)
    pair.advance(config.handshake_timeout_s - 0.5)
    assert not pair.transport.closed
    pair.advance(1)
    assert pair.transport.closed
    assert pair.session.state is State.CLOSED


def test_an_open_connection_outlives_the_handshake_timeout() -> None:
    config = BrokerConfig()
    pair = SessionPair(config)
    pair.handshake()
    pair.advance(config.handshake_timeout_s * 2)
    assert not pair.transport.closed
    assert pair.session.state is State.OPEN
