"""One AMQP connection as a sans-IO state machine: bytes in, bytes out, timers injected.

Rules of this file:
- No sockets, no asyncio: bytes come in through data_received, go out through a
  SessionTransport (transport.py, which says why), and timers and deferred work go
  through the Scheduler it was given, so a fake clock drives it in tests.
- States go HEADER -> START_OK -> TUNE_OK -> OPEN_WAIT -> OPEN -> CLOSING -> CLOSED
  (opening.py drives the handshake, routing.py the channel table). In CLOSING (we sent
  connection.close) everything but close / close-ok is dropped, as the spec asks.
- Reads are processed a whole data_received at a time; everything written meanwhile is
  buffered and written once at the end of the turn, after channels coalesce their confirms.
- The -ok of a definition change waits until the definitions are on disk, and so does
  everything sent after it (gates.py); a failed save closes the connection with 541
  (the change stays, and is saved later).
- A request answered on a later loop turn (basic.get of a head being read back from
  the store) holds the peer's input (`hold_input`): nothing sent after it is acted on
  until the answer is sent, so replies keep their order; other connections go on.
- Reading stops while a resource alarm blocks a publisher, while too much read is not
  yet parsed, and while the peer does not read what we write (the transport paused our
  writes, or a turn's output reached WRITE_BUFFER_HIGH): otherwise a peer that sends
  requests but never reads the answers would grow our write buffers without bound.
- An AMQPError from the codec or a channel becomes channel.close or connection.close; any
  other exception is a bug: logged, the connection closed with 541, no other one notices.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from contextlib import closing
from typing import TYPE_CHECKING, Any

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.assembler import AssemblyLimit
from kanin.amqp.errors import AMQPError, ConnectionError_
from kanin.amqp.frames import FrameReader, MethodFrame, PublishFrames, byte_count
from kanin.amqp.methods import build, close_for, encode_heartbeat, encode_method
from kanin.core.bugs import log_bug
from kanin.core.channel import Channel
from kanin.core.scheduling import Cancellable, Scheduler
from kanin.core.session import handshake
from kanin.core.session.gates import Gate, Gates
from kanin.core.session.heartbeat import Heartbeat
from kanin.core.session.opening import Opening
from kanin.core.session.routing import CLOSED, on_frame, on_publish_frames
from kanin.core.session.state import State
from kanin.core.session.transport import SessionTransport, address_text

if TYPE_CHECKING:
    from kanin.core.auth import User
    from kanin.core.broker import Broker
    from kanin.core.ports import ChannelServices
    from kanin.core.queues import Queue
    from kanin.core.vhost import VirtualHost

log = logging.getLogger("kanin.core.session")


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


class Session:
    """One AMQP connection's state machine: bytes in through data_received, bytes out
    through its transport's write, timers through the scheduler it is given."""

    def __init__(
        self,
        broker: Broker,
        scheduler: Scheduler,
        transport: SessionTransport,
        peer: tuple[Any, ...],
        local: tuple[Any, ...],
    ) -> None:
        self.broker = broker
        self.config = broker.config
        self._scheduler = scheduler  # its call_soon is the loop's: other connections go first
        self._soon = broker.soon  # writes, like dispatches, may run right after our frames
        self._registry = broker.connections
        self.state = State.HEADER
        self.transport = transport
        self.peer = peer
        # "client address:port -> our address:port", as RabbitMQ names it
        self.name = f"{address_text(peer)} -> {address_text(local)}"
        self.local = local
        self.connected_at_ms = scheduler.wall_clock_ms()
        self.opening = Opening(self)
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
        self.channel_services: ChannelServices  # once open: what its channels get
        self._out: list[bytes] = []
        self._gates = Gates()  # replies held behind definitions saves
        self._out_bytes = 0  # bytes in _out
        self._flush_scheduled = False
        self._dirty_channels: dict[int, Channel] = {}
        self._writable = True
        self._bytes_in = 0
        self._bytes_out = 0
        self._timers: list[Cancellable] = []
        self._heartbeat: Heartbeat | None = None
        self.is_publisher = False  # has sent basic.publish: subject to flow control
        self.blocked = False  # reading paused by a resource alarm
        self._backlogged = False  # reading paused: too much read but not yet parsed
        self._reading = True
        self._more_scheduled = False
        self._input_holds = 0  # requests awaiting an answer; the peer's input waits (header)
        self._unread_ticks = 0  # see _heartbeat_counters
        self.exclusive_queues: set[Queue] = set()  # deleted when this connection closes
        self.assembly_limit = AssemblyLimit(
            ASSEMBLY_LIMIT_MESSAGES * self.config.max_message_size_bytes, self._count_assembly
        )
        log.info("accepting AMQP connection %s", self.name)
        self._registry.add(self)
        self._timers.append(
            scheduler.call_later(self.config.handshake_timeout_s, self.opening.timed_out)
        )

    # -- input from the transport -----------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._bytes_in += len(data)
        self.broker.memory.note_read(len(data))
        if self.state is State.HEADER:
            data = self.opening.read_protocol_header(data)
            if not data:
                return
        if self._more_scheduled or not self._writable or self._input_holds:
            # A backlog is worked through turn by turn, or waits for resume_writing or
            # for an answer (hold_input).
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
            # Closed: compiled, a generator dropped early never runs its `finally` (frames.py).
            with closing(self.reader.frames(data, FRAMES_PER_TURN)) as frames:
                for frame in frames:
                    if isinstance(frame, PublishFrames):
                        on_publish_frames(self, frame)  # the usual frame, one call fewer
                    else:
                        on_frame(self, frame)
                    if self.state is CLOSED:
                        return
                    if not self.writable or self._input_holds:
                        break  # the rest waits until what we wrote has gone out, or an answer
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
            text = exc.reply_text.split(" - ", 1)[-1]
            self.fail(ConnectionError_(exc.reply_code, text, exc.class_id, exc.method_id))
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
            and not self._input_holds
            and not self.closed
        ):
            self._more_scheduled = True
            self._scheduler.call_soon(self._read_frames)

    def _update_reading(self) -> None:
        """Read the socket unless an alarm blocks us, a backlog is still unparsed, or the
        peer is not reading what we write."""
        if self.state is CLOSED:
            return
        want = not (self.blocked or self._backlogged or not self._writable)
        if want != self._reading:
            self._reading = want
            if want:
                self.transport.resume_reading()
            else:
                self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state is not CLOSED:
            # Neither side closed it the AMQP way (a close we sent may be unanswered).
            log.info(
                "closing AMQP connection %s%s: client unexpectedly closed TCP connection",
                self.name,
                self._who(),
            )
        self.state = CLOSED
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
        self._out_bytes = 0
        for queue in list(self.exclusive_queues):
            if not queue.deleted:
                self.vhost.remove_queue(queue)
        self.exclusive_queues.clear()

    def on_alarm(self, alarm: bool, reason: str) -> None:
        """Block a publishing connection while an alarm lasts: stop reading from it."""
        if self.state is CLOSED or not self.is_publisher:
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

    @property
    def bytes_received(self) -> int:
        return self._bytes_in

    @property
    def bytes_sent(self) -> int:
        return self._bytes_out

    # -- ConnectionPort ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is CLOSED

    @property
    def writable(self) -> bool:
        """Deliveries may go out: the transport is not paused, and this turn's output (with
        what waits behind a definitions save) is still below its high-water mark: one
        dispatch could otherwise queue hundreds of large messages before the transport, or
        the save, has a say."""
        return self._writable and self._out_bytes + self._gates.held_bytes < WRITE_BUFFER_HIGH

    def send(self, data: bytes) -> None:
        self.send_parts([data])

    def send_parts(self, parts: list[bytes]) -> None:
        if self.state is CLOSED:
            return
        size = byte_count(parts)
        if self._gates.shut:
            self._gates.hold(parts, size)
            return
        self._out.extend(parts)
        self._out_bytes += size
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._soon.call_soon(self._flush)

    def hold_until_saved(self) -> None:
        keeper = self.broker.definitions
        if keeper is None or self.state is CLOSED:
            return
        gate = Gate()
        if keeper.when_saved(functools.partial(self._gate_done, gate)):
            self._gates.add(gate)

    def hold_input(self) -> Callable[[], None]:
        """Act on nothing more the peer sent until the returned function is called (once,
        after the answer to the request being handled was sent): see the header."""
        self._input_holds += 1
        return self._release_input

    def _release_input(self) -> None:
        self._input_holds -= 1
        if not self._input_holds:
            self._continue_backlog()  # what arrived meanwhile, on the next turn

    def _gate_done(self, gate: Gate, problem: str | None) -> None:
        was_full = self._out_bytes + self._gates.held_bytes >= WRITE_BUFFER_HIGH
        free, failed = self._gates.landed(gate, problem)
        if free is None:
            return  # an earlier gate is still shut
        self._out.extend(free)
        self._out_bytes += byte_count(free)
        if failed is not None:
            # The -ok that opened the failed gate must not go out, nor anything after it
            # (fail drops every gate): RabbitMQ answers an internal failure with 541.
            self.fail(ConnectionError_(C.INTERNAL_ERROR, failed))
            return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._soon.call_soon(self._flush)
        if was_full:
            self._scheduler.call_soon(self._kick_consumers)  # deliveries stopped behind the gate

    def request_flush(self, channel: Channel) -> None:
        self._dirty_channels[channel.id] = channel
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._soon.call_soon(self._flush)

    def request_flush_next_turn(self, channel: Channel) -> None:
        # The loop's call_soon, not Soon's: after every connection readable now was read.
        self._dirty_channels[channel.id] = channel
        self._scheduler.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._dirty_channels:
            dirty, self._dirty_channels = self._dirty_channels, {}
            for channel in dirty.values():
                channel.flush()
        if self._out and self.state is not CLOSED:
            data = b"".join(self._out)
            self._out.clear()
            was_full = self._out_bytes >= WRITE_BUFFER_HIGH
            self._out_bytes = 0
            self._bytes_out += len(data)
            self.transport.write(data)
            if was_full and self._writable:
                # Deliveries stopped at the turn's limit and the transport took it all:
                # they go on next turn (not this one, so other connections get theirs).
                self._scheduler.call_soon(self._kick_consumers)

    # -- heartbeats ----------------------------------------------------------------------

    def start_heartbeat(self) -> None:
        self._heartbeat = Heartbeat(
            self._scheduler,
            self.heartbeat_s,
            self._heartbeat_counters,
            lambda: self.send(encode_heartbeat()),
            self._dead_peer,
        )
        self._heartbeat.start()

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
        self.state = CLOSED
        self.transport.abort()

    # -- closing ---------------------------------------------------------------------------

    def close_requested(self) -> None:
        log.info("closing AMQP connection %s%s: client closed it", self.name, self._who())
        self._shutdown_channels()
        self.send(encode_method(0, build(commands.Connection.CloseOk)))
        self._flush()
        self.state = CLOSED
        self.transport.close()

    def frame_while_closing(self, frame: Any) -> None:
        if not isinstance(frame, MethodFrame) or frame.channel != 0:
            return
        if isinstance(frame.method, commands.Connection.CloseOk | commands.Connection.Close):
            if isinstance(frame.method, commands.Connection.Close):
                self.send(encode_method(0, build(commands.Connection.CloseOk)))
                self._flush()
            self.state = CLOSED
            self.transport.close()

    def fail(self, exc: AMQPError) -> None:
        """A connection error: send connection.close and wait (bounded) for close-ok."""
        if self.state in (State.CLOSING, CLOSED):
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
        self.send(encode_method(0, close_for(commands.Connection.Close, exc)))
        self._flush()
        self.state = State.CLOSING
        self._timers.append(self._scheduler.call_later(CLOSE_TIMEOUT_S, self._abort))

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
        self.state = CLOSED
        self.transport.close()

    def _abort(self) -> None:
        if self.state is not CLOSED:
            self.abort()

    def abort(self) -> None:
        """Drop the connection now, whatever state it is in (the broker's last word at
        shutdown to peers that did not answer connection.close)."""
        self.state = CLOSED
        self.transport.abort()

    def _shutdown_channels(self) -> None:
        self._gates.clear()  # held replies are dropped; what closes the connection goes out
        for channel in self.channels.values():
            channel.shutdown()
        self.channels.clear()
        self._dirty_channels.clear()
