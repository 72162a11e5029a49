"""Where a session's frames go: the channel table and its rules (AMQP 0-9-1 §2.2.5).

Rules of this file:
- Frames arrive here only once the session has its protocol header; before OPEN only
  connection methods on channel 0 are accepted (the opening takes them), in CLOSING
  only close / close-ok are, and heartbeats are never more than traffic.
- A channel-level error closes that channel (channel.close, see Channel.fail); anything
  that breaks the connection's rules raises ConnectionError_ for the session to close.
- A whole publish (PublishFrames) goes to its channel in one call when nothing about it
  is unusual; otherwise it is taken apart, so every error is the one its frames give.
- channel_max caps how many channels are open, not their numbers (RabbitMQ 3.10), and a
  channel we are closing keeps its number until the peer's close-ok.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError, ConnectionError_
from kanin.amqp.frames import (
    BodyFrame,
    Frame,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    PublishFrames,
)
from kanin.amqp.methods import build, class_and_method, encode_method
from kanin.core.channel import Channel
from kanin.core.session.state import State

if TYPE_CHECKING:
    from kanin.core.session.session import Session

# The states checked for every frame, as Final names: compiled, these are read as C
# statics, where `State.OPEN` is a lookup on the enum class costing hundreds of
# instructions each time (session.py takes them from here too).
OPEN: Final = State.OPEN
CLOSING: Final = State.CLOSING
CLOSED: Final = State.CLOSED
# The method classes every method frame is checked against, for the same reason.
_PUBLISH: Final = commands.Basic.Publish
_CHANNEL_OPEN: Final = commands.Channel.Open
_CHANNEL_CLOSE: Final = commands.Channel.Close
_CHANNEL_CLOSE_OK: Final = commands.Channel.CloseOk


def on_frame(session: Session, frame: Frame) -> None:
    if isinstance(frame, PublishFrames):
        on_publish_frames(session, frame)
        return
    if isinstance(frame, HeartbeatFrame):
        return
    if session.state is CLOSING:
        session.frame_while_closing(frame)
        return
    if session.state is not OPEN:
        if not isinstance(frame, MethodFrame) or frame.channel != 0:
            raise ConnectionError_(
                C.UNEXPECTED_FRAME, "expected a connection method during the handshake"
            )
        session.opening.on_method(frame.method)
        return
    if frame.channel == 0:
        _on_channel_zero(session, frame)
        return
    channel = session.channels.get(frame.channel)
    if isinstance(frame, MethodFrame):
        if frame.method.__class__ is _PUBLISH:
            session.is_publisher = True
        _on_channel_method(session, frame.channel, channel, frame.method)
    elif channel is None:
        raise ConnectionError_(
            C.UNEXPECTED_FRAME, "expected method frame, got non method frame instead"
        )
    else:
        try:
            if isinstance(frame, HeaderFrame):
                channel.handle_header(frame)
            else:
                channel.handle_body(frame)
        except ChannelError as exc:
            channel.fail(exc)


def on_publish_frames(session: Session, frames: PublishFrames) -> None:
    """A whole publish: straight to the channel when it is open and between messages
    (the usual case); otherwise frame by frame, so every error is the usual one."""
    channel = session.channels.get(frames.channel)
    if (
        session.state is OPEN
        and channel is not None
        and not channel.closing
        and channel.assembler.accepts_whole(frames.header.body_size)
    ):
        session.is_publisher = True
        channel.publish_whole(frames.args, frames.header, frames.body)
        return
    for frame in frames.expand():
        on_frame(session, frame)
        if session.closed:
            return


def _on_channel_zero(session: Session, frame: MethodFrame | HeaderFrame | BodyFrame) -> None:
    if not isinstance(frame, MethodFrame):
        raise ConnectionError_(C.UNEXPECTED_FRAME, "content frame on channel 0")
    method = frame.method
    if isinstance(method, commands.Connection.Close):
        session.close_requested()
    elif isinstance(method, commands.Connection.UpdateSecret):
        session.send(encode_method(0, build(commands.Connection.UpdateSecretOk)))
    else:
        raise ConnectionError_(
            C.CHANNEL_ERROR,
            "unexpected method in connection state running",
            *class_and_method(method.index),
        )


def _on_channel_method(session: Session, number: int, channel: Channel | None, method: Any) -> None:
    if isinstance(method, _CHANNEL_OPEN):
        _open_channel(session, number, channel)
        return
    if channel is None:
        raise ConnectionError_(
            C.CHANNEL_ERROR, "expected 'channel.open'", *class_and_method(method.index)
        )
    if channel.closing:
        _on_method_while_closing(session, number, method)
        return
    channel.assembler.expect_method()  # a method in the middle of a message is 505
    if isinstance(method, _CHANNEL_CLOSE):
        channel.shutdown()
        del session.channels[number]
        session.send(encode_method(number, build(commands.Channel.CloseOk)))
        return
    if isinstance(method, _CHANNEL_CLOSE_OK):
        return  # close-ok for a close we never sent: nothing to do
    try:
        channel.handle_method(method)
    except ChannelError as exc:
        channel.fail(exc)


def _on_method_while_closing(session: Session, number: int, method: Any) -> None:
    """We sent channel.close: everything but close-ok is dropped, as in RabbitMQ 3.10.

    A channel.close that crossed ours gets close-ok, yet the number stays taken (a
    channel.open on it is still 504) until the peer's close-ok for our close arrives.
    """
    if isinstance(method, _CHANNEL_CLOSE_OK):
        del session.channels[number]
    elif isinstance(method, _CHANNEL_CLOSE):
        session.send(encode_method(number, build(commands.Channel.CloseOk)))


def _open_channel(session: Session, number: int, channel: Channel | None) -> None:
    if channel is not None:
        raise ConnectionError_(C.CHANNEL_ERROR, "second 'channel.open' seen", 20, 10)
    # RabbitMQ 3.10: channel_max caps how many channels are open, not their numbers.
    if session.channel_max and len(session.channels) >= session.channel_max:
        raise ConnectionError_(
            C.NOT_ALLOWED,
            f"number of channels opened ({len(session.channels)}) has reached the negotiated "
            f"channel_max ({session.channel_max})",
        )
    session.channels[number] = Channel(number, session, session.channel_services)
    session.send(encode_method(number, build(commands.Channel.OpenOk)))
