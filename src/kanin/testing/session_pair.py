"""A client against a Session with no socket and no event loop: session tests.

The session runs on a real Broker over a FakeScheduler; its transport is a recorder.
A test feeds client bytes or pamqp frames in, takes the server's frames out (decoded
by pamqp, as a client would), and moves the fake clock:

    pair = SessionPair()
    pair.handshake()                                  # header, start-ok, tune-ok, open
    pair.send_method(1, commands.Channel.Open())
    assert isinstance(pair.expect(1), commands.Channel.OpenOk)
    pair.advance(120)                                 # timers fire, heartbeats go out

Nothing here waits: what the session writes during a call is readable right after it,
once the fake loop's pending callbacks have run (send and advance run them). Two pairs may
share a broker (and its clock): `SessionPair(broker=first.broker, clock=first.clock)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pamqp import body, commands, frame, header, heartbeat
from pamqp.base import Frame

from kanin.amqp import constants as C
from kanin.config import BrokerConfig
from kanin.core.broker import Broker
from kanin.core.session.session import Session
from kanin.testing.clock import FakeScheduler

CLIENT = ("127.0.0.1", 40000)
SERVER = ("127.0.0.1", 5672)


@dataclass
class RecordingTransport:
    """A SessionTransport that keeps what the session asked of it."""

    written: bytearray = field(default_factory=bytearray, repr=False)
    reading: bool = True
    closed: bool = False  # close(): after what was written
    aborted: bool = False  # abort(): at once

    def write(self, data: bytes) -> None:
        assert not (self.closed or self.aborted), "write after close"
        self.written += data

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True


class SessionPair:
    def __init__(
        self,
        config: BrokerConfig | None = None,
        peer: tuple[str, int] = CLIENT,
        *,
        clock: FakeScheduler | None = None,
        broker: Broker | None = None,
    ) -> None:
        """A new broker on a new clock, unless given `broker` and the `clock` it runs on."""
        assert (clock is None) == (broker is None), "a broker comes with its clock"
        self.clock = clock or FakeScheduler()
        self.broker = broker or Broker(config or BrokerConfig(), self.clock)
        self.transport = RecordingTransport()
        self.session = Session(self.broker, self.clock, self.transport, peer, SERVER)
        self._unread = 0  # offset in transport.written of the first frame not yet read

    # -- client to server ----------------------------------------------------------------

    def send(self, data: bytes) -> None:
        """Bytes as the socket would deliver them, then the rest of that loop turn."""
        self.session.data_received(data)
        self.clock.run_soon()

    def send_frame(self, channel: int, value: Frame) -> None:
        self.send(frame.marshal(value, channel))

    def send_method(self, channel: int, method: Any) -> None:
        self.send_frame(channel, method)

    def publish(
        self,
        channel: int,
        payload: bytes,
        routing_key: str,
        exchange: str = "",
        properties: commands.Basic.Properties | None = None,
    ) -> None:
        """basic.publish, content header and body in one read, as clients send them."""
        self.send(self.publish_bytes(channel, payload, routing_key, exchange, properties))

    @staticmethod
    def publish_bytes(
        channel: int,
        payload: bytes,
        routing_key: str,
        exchange: str = "",
        properties: commands.Basic.Properties | None = None,
    ) -> bytes:
        method = commands.Basic.Publish(exchange=exchange, routing_key=routing_key)
        content = header.ContentHeader(0, len(payload), properties or commands.Basic.Properties())
        return (
            frame.marshal(method, channel)
            + frame.marshal(content, channel)
            + frame.marshal(body.ContentBody(payload), channel)
        )

    def advance(self, seconds: float) -> None:
        """Move the fake clock: due timers fire, in order."""
        self.clock.advance(seconds)

    # -- server to client ----------------------------------------------------------------

    def frames(self) -> list[tuple[int, Any]]:
        """Every (channel, pamqp frame) written since the last call. The protocol header
        the server sends back to a header it refuses comes out as (0, bytes)."""
        self.clock.run_soon()  # the loop turn ends: what was sent is written
        out: list[tuple[int, Any]] = []
        data = bytes(self.transport.written[self._unread :])
        offset = 0
        while offset < len(data):
            if data[offset : offset + 4] == b"AMQP":
                out.append((0, data[offset : offset + 8]))
                offset += 8
                continue
            used, channel, value = frame.unmarshal(data[offset:])
            out.append((channel, value))
            offset += used
        self._unread += offset
        return out

    def methods(self) -> list[tuple[int, Any]]:
        """frames(), without heartbeats and content."""
        return [(n, f) for n, f in self.frames() if not isinstance(f, _NOT_METHODS)]

    def expect(self, channel: int) -> Any:
        """The one method the server has written since the last read, on `channel`."""
        written = self.methods()
        assert len(written) == 1, written
        number, method = written[0]
        assert number == channel, written
        return method

    # -- the usual openings --------------------------------------------------------------

    def handshake(
        self,
        username: str = "guest",
        password: str = "guest",
        heartbeat: int = 0,
        frame_max: int = 131072,
        capabilities: dict[str, Any] | None = None,
        vhost: str = "/",
    ) -> None:
        """Header to open-ok; the server's frames on the way are checked and consumed."""
        self.send(C.PROTOCOL_HEADER)
        assert isinstance(self.expect(0), commands.Connection.Start)
        self.send_method(0, self.start_ok(username, password, capabilities))
        tune = self.expect(0)
        assert isinstance(tune, commands.Connection.Tune), tune
        self.send_method(
            0,
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=frame_max, heartbeat=heartbeat
            ),
        )
        self.send_method(0, commands.Connection.Open(virtual_host=vhost))
        assert isinstance(self.expect(0), commands.Connection.OpenOk)

    @staticmethod
    def start_ok(
        username: str, password: str, capabilities: dict[str, Any] | None = None
    ) -> commands.Connection.StartOk:
        return commands.Connection.StartOk(
            client_properties={"capabilities": capabilities or {}},
            mechanism="PLAIN",
            response=f"\0{username}\0{password}",
        )

    def open_channel(self, number: int = 1) -> None:
        self.send_method(number, commands.Channel.Open())
        assert isinstance(self.expect(number), commands.Channel.OpenOk)


_NOT_METHODS = (body.ContentBody, header.ContentHeader, heartbeat.Heartbeat, bytes)
