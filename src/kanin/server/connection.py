"""One AMQP connection: an asyncio Protocol that feeds the codec and the channels.

Rules of this file:
- States go HEADER -> START_OK -> TUNE_OK -> OPEN_WAIT -> OPEN -> CLOSING -> CLOSED.
  Before OPEN only the handshake methods are accepted; in CLOSING (we sent
  connection.close) everything but close / close-ok is dropped, as the spec asks.
- Reads are processed a whole data_received at a time; everything written meanwhile
  is buffered and written once at the end of the event-loop turn, after the channels
  have coalesced their publisher confirms.
- The -ok of a definition change waits until the definitions are on disk, and so does
  everything sent after it: each such -ok opens a gate, and what is sent while gates
  are shut is held in the newest one. Gates open in order as saves land; a failed
  save closes the connection with 541 (the change stays, and is saved later).
- Reading stops while a resource alarm blocks a publisher, while too much read is not
  yet parsed, and while the peer does not read what we write (the transport paused our
  writes, or a turn's output reached WRITE_BUFFER_HIGH): otherwise a peer that sends
  requests but never reads the answers would grow our write buffers without bound.
- An AMQPError from the codec or a channel becomes channel.close or connection.close;
  any other exception is a bug: it is logged and the connection closed with 541,
  and no other connection notices.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.assembler import AssemblyLimit
from kanin.amqp.errors import AMQPError, ChannelError, ConnectionError_
from kanin.amqp.frames import (
    BodyFrame,
    Frame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    PublishFrames,
)
from kanin.amqp.methods import build, class_and_method, encode_heartbeat, encode_method, short_text
from kanin.core.channel import Channel
from kanin.server import handshake
from kanin.server.bugs import log_bug
from kanin.server.heartbeat import Heartbeat

if TYPE_CHECKING:
    from kanin.core.auth import User
    from kanin.core.broker import Broker
    from kanin.core.queues import Queue
    from kanin.core.vhost import VirtualHost

log = logging.getLogger(__name__)

# A peer that sent connection.close-ok never gets longer than this to go away.
CLOSE_TIMEOUT_S = 3.0
WRITE_BUFFER_HIGH = 4 * 1024 * 1024
WRITE_BUFFER_LOW = 1 * 1024 * 1024
# Fairness between connections: frames one connection may act on per event-loop turn
# (about 85 small publishes), and how much it may have read ahead before we stop reading.
FRAMES_PER_TURN = 256
BACKLOG_PAUSE_BYTES = 256 * 1024
# Unfinished message bodies one connection may hold across its channels, in maximum
# message sizes: one maximal message plus as much again for others interleaved with it.
# Clients send a message's frames together, so more means a peer holding bodies open;
# the memory alarm bounds many connections together, as these bytes count towards it.
ASSEMBLY_LIMIT_MESSAGES = 2


class State(enum.Enum):
    HEADER = 1
    START_OK = 2
    TUNE_OK = 3
    OPEN_WAIT = 4
    OPEN = 5
    CLOSING = 6
    CLOSED = 7


@dataclass(eq=False)
class _Gate:
    """Frames held until the definitions save this gate waits for has landed."""

    frames: list[bytes] = field(default_factory=list)
    done: bool = False
    problem: str | None = None  # why the save failed


class AMQPConnection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.loop = asyncio.get_running_loop()
        self._soon = broker.soon  # writes, like dispatches, may run right after our frames
        self._registry = broker.connections
        self.state = State.HEADER
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[Any, ...] = ("?", 0)
        self.name = "?"  # "client address:port -> our address:port", as RabbitMQ names it
        self._header = b""
        # Until tune-ok, frames may be as large as the frame_max we are about to propose.
        self.reader = FrameReader(self.config.frame_max or 131072, whole_publishes=True)
        self.channels: dict[int, Channel] = {}
        self.channel_max = self.config.channel_max
        self.frame_max = C.FRAME_MIN_SIZE
        self.heartbeat_s = 0
        self.client_properties: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        self.mechanism = ""
        self.user: User
        self.vhost: VirtualHost
        self._out: list[bytes] = []
        self._gates: deque[_Gate] = deque()  # oldest first; see the header
        self._out_bytes = 0  # bytes in _out
        self._held_bytes = 0  # bytes held in _gates
        self._flush_scheduled = False
        self._dirty_channels: dict[int, Channel] = {}
        self._writable = True
        self._bytes_in = 0
        self._bytes_out = 0
        self._timers: list[asyncio.TimerHandle] = []
        self._heartbeat: Heartbeat | None = None
        self.is_publisher = False  # has sent basic.publish: subject to flow control
        self.blocked = False  # reading paused by a resource alarm
        self._backlogged = False  # reading paused: too much read but not yet parsed
        self._reading = True
        self._more_scheduled = False
        self._unread_ticks = 0  # see _heartbeat_counters
        self.exclusive_queues: set[Queue] = set()  # deleted when this connection closes
        self.assembly_limit = AssemblyLimit(
            ASSEMBLY_LIMIT_MESSAGES * self.config.max_message_size_bytes, self._count_assembly
        )

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self.transport = cast(asyncio.Transport, transport)
        transport = self.transport
        self.peer = transport.get_extra_info("peername") or ("?", 0)
        local = transport.get_extra_info("sockname") or ("?", 0)
        self.name = f"{_address(self.peer)} -> {_address(local)}"
        log.info("accepting AMQP connection %s", self.name)
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        self._registry.add(self)
        self._timers.append(
            self.loop.call_later(self.config.handshake_timeout_s, self._handshake_timeout)
        )

    def data_received(self, data: bytes) -> None:
        self._bytes_in += len(data)
        self.broker.memory.note_read(len(data))
        if self.state is State.HEADER:
            data = self._read_protocol_header(data)
            if not data:
                return
        if self._more_scheduled or not self._writable:
            # A backlog is being worked through turn by turn, or waits for resume_writing.
            self.reader.append(data)
            self._backlogged = self.reader.buffered > BACKLOG_PAUSE_BYTES
            self._update_reading()
            return
        self._read_frames(data)

    def _read_frames(self, data: bytes = b"") -> None:
        """Act on up to FRAMES_PER_TURN buffered frames, then give other connections a turn.

        Without the cap, one publisher's 256 KB read (thousands of publishes) would run
        before a consumer's ack is even read, and consumers would starve while the queue
        grew. What is left waits in the reader for the next loop turn; while more than
        BACKLOG_PAUSE_BYTES wait, the socket is not read, so TCP pushes back.
        """
        self._more_scheduled = False
        if self.closed:  # this was a continuation, and the peer went away meanwhile
            return
        try:
            for frame in self.reader.frames(data, FRAMES_PER_TURN):
                self._on_frame(frame)
                if self.closed:
                    return
                if not self.writable:
                    break  # the rest waits until what we wrote has gone out
            alarms = self.broker.alarms
            if self.is_publisher and alarms.blocked and not self.blocked:
                self.on_alarm(True, alarms.reason)
        except handshake.SilentClose as exc:
            log.warning("closing AMQP connection %s during handshake: %s", self.name, exc)
            self._drop()
            return
        except ConnectionError_ as exc:
            self.fail(exc)
            return
        except AMQPError as exc:  # a channel-level code raised where no channel applies
            self.fail(
                ConnectionError_(
                    exc.reply_code, exc.reply_text.split(" - ", 1)[-1], exc.class_id, exc.method_id
                )
            )
            return
        except Exception as exc:
            log_bug(f"on connection {self.name}{self._who()}", exc)
            self.fail(ConnectionError_(C.INTERNAL_ERROR, "internal error"))
            return
        self._soon.run_pending()  # this writes what the frames produced
        self._continue_backlog()
        self._backlogged = self.reader.buffered > BACKLOG_PAUSE_BYTES
        self._update_reading()

    def _continue_backlog(self) -> None:
        """Work through frames still buffered on the next turn; while our writes are
        paused, resume_writing does that instead."""
        if (
            self.reader.buffered >= C.FRAME_HEADER_SIZE
            and not self._more_scheduled
            and self._writable
            and not self.closed
        ):
            self._more_scheduled = True
            self.loop.call_soon(self._read_frames)

    def _update_reading(self) -> None:
        """Read the socket unless an alarm blocks us, a backlog is still unparsed, or the
        peer is not reading what we write."""
        if self.transport is None or self.state is State.CLOSED:
            return
        want = not (self.blocked or self._backlogged or not self._writable)
        if want != self._reading:
            self._reading = want
            if want:
                self.transport.resume_reading()
            else:
                self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state is not State.CLOSED:
            # Neither side closed it the AMQP way (a close we sent may be unanswered).
            log.info(
                "closing AMQP connection %s%s: client unexpectedly closed TCP connection",
                self.name,
                self._who(),
            )
        self.state = State.CLOSED
        self._registry.discard(self)
        for timer in self._timers:
            timer.cancel()
        if self._heartbeat is not None:
            self._heartbeat.stop()
        for channel in self.channels.values():
            channel.shutdown()
        self.channels.clear()
        self._out.clear()
        self._gates.clear()
        self._out_bytes = self._held_bytes = 0
        for queue in list(self.exclusive_queues):
            if not queue.deleted:
                self.vhost.remove_queue(queue)
        self.exclusive_queues.clear()

    def on_alarm(self, alarm: bool, reason: str) -> None:
        """Block a publishing connection while an alarm lasts: stop reading from it."""
        if self.transport is None or self.state is State.CLOSED or not self.is_publisher:
            return
        if alarm == self.blocked:
            return
        self.blocked = alarm
        if self.client_capabilities.get("connection.blocked"):
            method: Any = (
                build(commands.Connection.Blocked, reason=reason)
                if alarm
                else build(commands.Connection.Unblocked)
            )
            self.send(encode_method(0, method))
        self._update_reading()

    def pause_writing(self) -> None:
        self._writable = False
        self._update_reading()

    def resume_writing(self) -> None:
        self._writable = True
        self._update_reading()
        self._continue_backlog()
        self._kick_consumers()

    def _kick_consumers(self) -> None:
        """Deliveries stopped while we could not write: let the queues dispatch again."""
        for channel in self.channels.values():
            channel.wake()  # consumers parked while the socket was full

    def _count_assembly(self, delta: int) -> None:
        """Unfinished message bodies count towards the memory alarm like queued ones."""
        if delta > 0:
            self.broker.memory.add(delta)
        else:
            self.broker.memory.release(-delta)

    # -- ConnectionPort ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def writable(self) -> bool:
        """Deliveries may go out: the transport is not paused, and this turn's output (with
        what waits behind a definitions save) is still below its high-water mark: one
        dispatch could otherwise queue hundreds of large messages before the transport, or
        the save, has a say."""
        return self._writable and self._out_bytes + self._held_bytes < WRITE_BUFFER_HIGH

    def send(self, data: bytes) -> None:
        self.send_parts([data])

    def send_parts(self, parts: list[bytes]) -> None:
        if self.state is State.CLOSED:
            return
        size = sum(map(len, parts))
        if self._gates:
            self._gates[-1].frames.extend(parts)
            self._held_bytes += size
            return
        self._out.extend(parts)
        self._out_bytes += size
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._soon.call_soon(self._flush)

    def hold_until_saved(self) -> None:
        keeper = self.broker.definitions
        if keeper is None or self.state is State.CLOSED:
            return
        gate = _Gate()
        if keeper.when_saved(functools.partial(self._gate_done, gate)):
            self._gates.append(gate)

    def _gate_done(self, gate: _Gate, problem: str | None) -> None:
        gate.done, gate.problem = True, problem
        gates = self._gates
        was_full = self._out_bytes + self._held_bytes >= WRITE_BUFFER_HIGH
        released = False
        while gates and gates[0].done:
            first = gates.popleft()
            if first.problem is not None:
                # The -ok that opened this gate must not go out, nor anything after it
                # (fail drops every gate): RabbitMQ answers an internal failure with 541
                # on the connection.
                self.fail(ConnectionError_(C.INTERNAL_ERROR, first.problem))
                return
            size = sum(map(len, first.frames))
            self._out.extend(first.frames)
            self._out_bytes += size
            self._held_bytes -= size
            released = True
        if released and not self._flush_scheduled:
            self._flush_scheduled = True
            self._soon.call_soon(self._flush)
        if released and was_full:
            self.loop.call_soon(self._kick_consumers)  # deliveries stopped behind the gate

    def request_flush(self, channel: Channel) -> None:
        self._dirty_channels[channel.id] = channel
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._soon.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._dirty_channels:
            dirty, self._dirty_channels = self._dirty_channels, {}
            for channel in dirty.values():
                channel.flush()
        if self._out and self.transport is not None and self.state is not State.CLOSED:
            data = b"".join(self._out)
            self._out.clear()
            was_full = self._out_bytes >= WRITE_BUFFER_HIGH
            self._out_bytes = 0
            self._bytes_out += len(data)
            self.transport.write(data)
            if was_full and self._writable:
                # Deliveries stopped at the turn's limit and the transport took it all:
                # they go on next turn (not this one, so other connections get theirs).
                self.loop.call_soon(self._kick_consumers)

    # -- handshake -----------------------------------------------------------------------

    def _read_protocol_header(self, data: bytes) -> bytes:
        needed = 8 - len(self._header)
        self._header += data[:needed]
        rest = data[needed:]
        accepted = C.ACCEPTED_PROTOCOL_HEADERS
        if len(self._header) < 8:
            if not any(header.startswith(self._header) for header in accepted):
                self._refuse_header()
            return b""
        if self._header not in accepted:
            self._refuse_header()
            return b""
        self.state = State.START_OK
        self.send(encode_method(0, handshake.connection_start()))
        return rest

    def _refuse_header(self) -> None:
        # The spec's answer to a protocol we do not speak: our header, then close.
        assert self.transport is not None
        self.transport.write(C.PROTOCOL_HEADER)
        self.state = State.CLOSED
        self.transport.close()

    def _handshake_timeout(self) -> None:
        if self.state not in (State.OPEN, State.CLOSED) and self.transport is not None:
            log.warning("closing AMQP connection %s: handshake timed out", self.name)
            self.state = State.CLOSED
            self.transport.close()

    def _on_handshake(self, method: Any) -> None:
        if self.state is State.START_OK and isinstance(method, commands.Connection.StartOk):
            self._on_start_ok(method)
        elif self.state is State.TUNE_OK and isinstance(method, commands.Connection.TuneOk):
            self._on_tune_ok(method)
        elif self.state is State.OPEN_WAIT and isinstance(method, commands.Connection.Open):
            self._on_open(method)
        else:
            raise ConnectionError_(
                C.COMMAND_INVALID,
                f"unexpected method {method.name} during connection handshake",
                *class_and_method(method.index),
            )

    def _on_start_ok(self, method: commands.Connection.StartOk) -> None:
        self.client_properties = method.client_properties or {}
        self.client_capabilities = handshake.client_capabilities(self.client_properties)
        self.mechanism = method.mechanism
        username, password = handshake.parse_credentials(method.mechanism, method.response)
        user = self.broker.users.authenticate(username, password)
        refusal = ""
        if user is None:
            refusal = f"login refused for user {username!r}: bad credentials"
        elif user.name in self.config.loopback_users and not self._from_loopback():
            refusal = f"user {user.name!r} may only connect via localhost"
        if refusal:
            # Without authentication_failure_close the client gets no reason, as in RabbitMQ.
            if not self.client_capabilities.get("authentication_failure_close"):
                raise handshake.SilentClose(refusal)
            log.warning("closing AMQP connection %s: %s", self.name, refusal)
            raise handshake.login_refused(method.mechanism)
        assert user is not None
        self.user = user
        self.state = State.TUNE_OK
        self.send(
            encode_method(
                0,
                build(
                    commands.Connection.Tune,
                    channel_max=self.config.channel_max,
                    frame_max=self.config.frame_max,
                    heartbeat=self.config.heartbeat_s,
                ),
            )
        )

    def _from_loopback(self) -> bool:
        return handshake.is_loopback(str(self.peer[0]))

    def _on_tune_ok(self, method: commands.Connection.TuneOk) -> None:
        self.channel_max, self.frame_max, self.heartbeat_s = handshake.negotiate_tune(
            self.config, method
        )
        self.reader.frame_max = self.frame_max
        self.state = State.OPEN_WAIT
        if self.heartbeat_s:
            self._heartbeat = Heartbeat(
                self.loop,
                self.heartbeat_s,
                self._heartbeat_counters,
                lambda: self.send(encode_heartbeat()),
                self._dead_peer,
            )
            self._heartbeat.start()

    def _on_open(self, method: commands.Connection.Open) -> None:
        vhost = self.broker.vhosts.get(method.virtual_host)
        if vhost is None:
            raise ConnectionError_(C.NOT_ALLOWED, f"vhost {method.virtual_host} not found", 10, 40)
        if vhost.name not in self.user.permissions:
            raise ConnectionError_(
                C.NOT_ALLOWED,
                f"access to vhost '{vhost.name}' refused for user '{self.user.name}'",
                10,
                40,
            )
        self.vhost = vhost
        self.state = State.OPEN
        log.info(
            "connection %s: user '%s' authenticated and granted access to vhost '%s'",
            self.name,
            self.user.name,
            vhost.name,
        )
        self.send(encode_method(0, build(commands.Connection.OpenOk)))

    # -- heartbeats ----------------------------------------------------------------------

    def _heartbeat_counters(self) -> tuple[int, int]:
        """Bytes in and out so far, for the heartbeat. While we do not read the socket
        (an alarm blocks the peer, or it does not read what we write), its heartbeats wait
        unread: its silence is ours, so it counts as heard, as RabbitMQ pauses its
        heartbeat monitor for a blocked connection. A peer that has gone is still found
        out when a heartbeat we write to it fails."""
        if not self._reading:
            self._unread_ticks += 1
        return self._bytes_in + self._unread_ticks, self._bytes_out + self._out_bytes

    def _dead_peer(self) -> None:
        log.warning(
            "closing AMQP connection %s%s: missed heartbeats from client, timeout: %ss",
            self.name,
            self._who(),
            self.heartbeat_s,
        )
        self.state = State.CLOSED
        if self.transport is not None:
            self.transport.abort()

    # -- frames --------------------------------------------------------------------------

    def _on_frame(self, frame: Frame) -> None:
        if isinstance(frame, PublishFrames):
            self._on_publish_frames(frame)
            return
        if isinstance(frame, HeartbeatFrame):
            return
        if self.state is State.CLOSING:
            self._on_frame_while_closing(frame)
            return
        if self.state is not State.OPEN:
            if not isinstance(frame, MethodFrame) or frame.channel != 0:
                raise ConnectionError_(
                    C.UNEXPECTED_FRAME, "expected a connection method during the handshake"
                )
            self._on_handshake(frame.method)
            return
        if frame.channel == 0:
            self._on_channel_zero(frame)
            return
        channel = self.channels.get(frame.channel)
        if isinstance(frame, MethodFrame):
            if frame.method.__class__ is commands.Basic.Publish:
                self.is_publisher = True
            self._on_channel_method(frame.channel, channel, frame.method)
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

    def _on_publish_frames(self, frames: PublishFrames) -> None:
        """A whole publish: straight to the channel when it is open and between messages
        (the usual case); otherwise frame by frame, so every error is the usual one."""
        channel = self.channels.get(frames.channel)
        if (
            self.state is State.OPEN
            and channel is not None
            and not channel.closing
            and channel.assembler.idle
            and frames.header.body_size <= channel.assembler.max_body_bytes
        ):
            self.is_publisher = True
            try:
                channel.publish_whole(frames.method, frames.header, frames.body)
            except ChannelError as exc:
                channel.fail(exc)
            return
        for frame in frames.expand():
            self._on_frame(frame)
            if self.closed:
                return

    def _on_channel_zero(self, frame: MethodFrame | HeaderFrame | BodyFrame) -> None:
        if not isinstance(frame, MethodFrame):
            raise ConnectionError_(C.UNEXPECTED_FRAME, "content frame on channel 0")
        method = frame.method
        if isinstance(method, commands.Connection.Close):
            self._close_requested()
        elif isinstance(method, commands.Connection.UpdateSecret):
            self.send(encode_method(0, build(commands.Connection.UpdateSecretOk)))
        else:
            raise ConnectionError_(
                C.CHANNEL_ERROR,
                "unexpected method in connection state running",
                *class_and_method(method.index),
            )

    def _on_channel_method(self, number: int, channel: Channel | None, method: Any) -> None:
        if isinstance(method, commands.Channel.Open):
            self._open_channel(number, channel)
            return
        if channel is None:
            raise ConnectionError_(
                C.CHANNEL_ERROR, "expected 'channel.open'", *class_and_method(method.index)
            )
        if channel.closing:
            self._on_method_while_closing(number, method)
            return
        channel.assembler.expect_method()  # a method in the middle of a message is 505
        if isinstance(method, commands.Channel.Close):
            channel.shutdown()
            del self.channels[number]
            self.send(encode_method(number, build(commands.Channel.CloseOk)))
            return
        if isinstance(method, commands.Channel.CloseOk):
            return  # close-ok for a close we never sent: nothing to do
        try:
            channel.handle_method(method)
        except ChannelError as exc:
            channel.fail(exc)

    def _on_method_while_closing(self, number: int, method: Any) -> None:
        """We sent channel.close: everything but close-ok is dropped, as in RabbitMQ 3.10.

        A channel.close that crossed ours gets close-ok, yet the number stays taken (a
        channel.open on it is still 504) until the peer's close-ok for our close arrives.
        """
        if isinstance(method, commands.Channel.CloseOk):
            del self.channels[number]
        elif isinstance(method, commands.Channel.Close):
            self.send(encode_method(number, build(commands.Channel.CloseOk)))

    def _open_channel(self, number: int, channel: Channel | None) -> None:
        if channel is not None:
            raise ConnectionError_(C.CHANNEL_ERROR, "second 'channel.open' seen", 20, 10)
        # RabbitMQ 3.10: channel_max caps how many channels are open, not their numbers.
        if self.channel_max and len(self.channels) >= self.channel_max:
            raise ConnectionError_(
                C.NOT_ALLOWED,
                f"number of channels opened ({len(self.channels)}) has reached the negotiated "
                f"channel_max ({self.channel_max})",
            )
        self.channels[number] = Channel(number, self)
        self.send(encode_method(number, build(commands.Channel.OpenOk)))

    # -- closing ---------------------------------------------------------------------------

    def _close_requested(self) -> None:
        log.info("closing AMQP connection %s%s: client closed it", self.name, self._who())
        self._shutdown_channels()
        self.send(encode_method(0, build(commands.Connection.CloseOk)))
        self._flush()
        self.state = State.CLOSED
        if self.transport is not None:
            self.transport.close()

    def _on_frame_while_closing(self, frame: Any) -> None:
        if not isinstance(frame, MethodFrame) or frame.channel != 0:
            return
        if isinstance(frame.method, commands.Connection.CloseOk | commands.Connection.Close):
            if isinstance(frame.method, commands.Connection.Close):
                self.send(encode_method(0, build(commands.Connection.CloseOk)))
                self._flush()
            self.state = State.CLOSED
            if self.transport is not None:
                self.transport.close()

    def fail(self, exc: AMQPError) -> None:
        """A connection error: send connection.close and wait (bounded) for close-ok."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        log.info(
            "closing AMQP connection %s%s: %d %s",
            self.name,
            self._who(),
            exc.reply_code,
            exc.reply_text,
        )
        self._shutdown_channels()
        # Replies already queued (connection.start, open-ok, ...) still go out first.
        self.send(
            encode_method(
                0,
                build(
                    commands.Connection.Close,
                    reply_code=exc.reply_code,
                    reply_text=short_text(exc.reply_text),
                    class_id=exc.class_id,
                    method_id=exc.method_id,
                ),
            )
        )
        self._flush()
        self.state = State.CLOSING
        self._timers.append(self.loop.call_later(CLOSE_TIMEOUT_S, self._abort))

    def close_forced(self, text: str) -> None:
        """Close from the broker side (shutdown, management): 320 CONNECTION_FORCED."""
        self.fail(ConnectionError_(C.CONNECTION_FORCED, text))

    def _who(self) -> str:
        """(vhost '/', user 'guest') once known: log lines name who was connected."""
        user = getattr(self, "user", None)
        if user is None:
            return ""
        vhost = getattr(self, "vhost", None)
        return f" (vhost '{vhost.name}', user '{user.name}')" if vhost else f" (user '{user.name}')"

    def _drop(self) -> None:
        """Close the socket with no connection.close (handshake refusals)."""
        self.state = State.CLOSED
        if self.transport is not None:
            self.transport.close()

    def _abort(self) -> None:
        if self.transport is not None and self.state is not State.CLOSED:
            self.state = State.CLOSED
            self.transport.abort()

    def _shutdown_channels(self) -> None:
        self._gates.clear()  # held replies are dropped; what closes the connection goes out
        self._held_bytes = 0
        for channel in self.channels.values():
            channel.shutdown()
        self.channels.clear()
        self._dirty_channels.clear()


def _address(address: tuple[Any, ...]) -> str:
    host = str(address[0])
    return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
