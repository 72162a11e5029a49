"""The channel table and close rules of a session, socket-free: opening and closing
channels, closes that cross, frame_max."""

from __future__ import annotations

import pytest
from pamqp import body, commands

from kanin.amqp import constants as C
from kanin.core.session.state import State
from kanin.testing.session_pair import SessionPair


@pytest.fixture
def pair() -> SessionPair:
    opened = SessionPair()
    opened.handshake(frame_max=4096)
    return opened


def fail_channel(pair: SessionPair, number: int) -> None:
    """Make the server close channel `number` (a passive declare of a missing queue)."""
    pair.send_method(number, commands.Queue.Declare(queue="missing", passive=True))
    close = pair.expect(number)
    assert isinstance(close, commands.Channel.Close)
    assert close.reply_code == C.NOT_FOUND


def test_a_channel_opens_and_closes(pair: SessionPair) -> None:
    pair.open_channel(1)
    assert set(pair.session.channels) == {1}
    pair.send_method(
        1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    assert isinstance(pair.expect(1), commands.Channel.CloseOk)
    assert pair.session.channels == {}
    pair.open_channel(1)  # the number is free again


def test_opening_an_open_channel_again_is_504(pair: SessionPair) -> None:
    pair.open_channel(3)
    pair.send_method(3, commands.Channel.Open())
    close = pair.expect(0)
    assert isinstance(close, commands.Connection.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (C.CHANNEL_ERROR, 20, 10)


def test_a_method_on_a_channel_never_opened_is_504(pair: SessionPair) -> None:
    pair.send_method(5, commands.Queue.Declare(queue="q"))
    close = pair.expect(0)
    assert close.reply_code == C.CHANNEL_ERROR
    assert pair.session.state is State.CLOSING


def test_content_on_a_channel_never_opened_is_505(pair: SessionPair) -> None:
    pair.send_frame(5, body.ContentBody(b"stray"))
    assert pair.expect(0).reply_code == C.UNEXPECTED_FRAME


def test_a_channel_error_closes_only_that_channel(pair: SessionPair) -> None:
    pair.open_channel(1)
    pair.open_channel(2)
    fail_channel(pair, 1)
    pair.send_method(2, commands.Queue.Declare(queue="other"))
    assert isinstance(pair.expect(2), commands.Queue.DeclareOk)
    assert pair.session.state is State.OPEN


def test_a_closing_channel_drops_everything_but_close_ok(pair: SessionPair) -> None:
    pair.open_channel(1)
    fail_channel(pair, 1)
    pair.send_method(1, commands.Queue.Declare(queue="ignored"))
    assert pair.frames() == []
    assert "ignored" not in pair.broker.vhosts["/"].queues
    pair.send_method(1, commands.Channel.CloseOk())
    assert 1 not in pair.session.channels


def test_crossing_channel_closes_both_get_close_ok(pair: SessionPair) -> None:
    pair.open_channel(1)
    fail_channel(pair, 1)
    pair.send_method(
        1, commands.Channel.Close(reply_code=200, reply_text="crossing", class_id=0, method_id=0)
    )
    assert isinstance(pair.expect(1), commands.Channel.CloseOk)
    # The number stays taken until the peer's close-ok for our close.
    assert 1 in pair.session.channels
    pair.send_method(1, commands.Channel.CloseOk())
    pair.open_channel(1)


def test_reopening_a_channel_before_its_close_ok_is_504(pair: SessionPair) -> None:
    pair.open_channel(1)
    fail_channel(pair, 1)
    pair.send_method(
        1, commands.Channel.Close(reply_code=200, reply_text="crossing", class_id=0, method_id=0)
    )
    pair.frames()
    pair.send_method(1, commands.Channel.Open())
    assert pair.expect(0).reply_code == C.CHANNEL_ERROR


def test_a_client_close_is_answered_and_the_socket_closed(pair: SessionPair) -> None:
    pair.open_channel(1)
    pair.send_method(
        0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    assert isinstance(pair.expect(0), commands.Connection.CloseOk)
    assert pair.transport.closed
    assert pair.session.state is State.CLOSED
    assert pair.session.channels == {}


def test_crossing_connection_closes(pair: SessionPair) -> None:
    pair.session.close_forced("shutting down")
    close = pair.expect(0)
    assert (close.reply_code, close.reply_text) == (
        C.CONNECTION_FORCED,
        "CONNECTION_FORCED - shutting down",
    )
    assert pair.session.state is State.CLOSING
    pair.send_method(
        0, commands.Connection.Close(reply_code=200, reply_text="crossing", class_id=0, method_id=0)
    )
    assert isinstance(pair.expect(0), commands.Connection.CloseOk)
    assert pair.transport.closed
    assert pair.session.state is State.CLOSED


def test_while_closing_the_connection_everything_else_is_dropped(pair: SessionPair) -> None:
    pair.session.close_forced("going")
    pair.frames()
    pair.send_method(1, commands.Channel.Open())
    pair.send_method(0, commands.Connection.UpdateSecret(new_secret="x", reason="r"))
    assert pair.frames() == []
    assert not pair.transport.closed
    pair.send_method(0, commands.Connection.CloseOk())
    assert pair.transport.closed
    assert pair.frames() == []  # close-ok is not answered


def test_an_unanswered_close_is_given_up_on(pair: SessionPair) -> None:
    pair.session.close_forced("going")
    pair.advance(1)
    assert not pair.transport.aborted
    pair.advance(5)
    assert pair.transport.aborted


def test_a_frame_above_frame_max_is_501(pair: SessionPair) -> None:
    pair.open_channel(1)
    pair.send_method(1, commands.Queue.Declare(queue="q"))
    pair.frames()
    pair.publish(1, b"x" * 5000, routing_key="q")  # one body frame, larger than 4096
    close = pair.expect(0)
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == C.FRAME_ERROR
    assert pair.broker.vhosts["/"].queues["q"].message_count == 0


def test_content_on_channel_zero_is_505(pair: SessionPair) -> None:
    pair.send_frame(0, body.ContentBody(b"x"))
    assert pair.expect(0).reply_code == C.UNEXPECTED_FRAME


def test_a_whole_publish_reaches_the_queue(pair: SessionPair) -> None:
    pair.open_channel(1)
    pair.send_method(1, commands.Queue.Declare(queue="q"))
    pair.frames()
    pair.publish(1, b"hello", routing_key="q")
    assert pair.frames() == []
    assert pair.broker.vhosts["/"].queues["q"].message_count == 1
    assert pair.session.is_publisher
