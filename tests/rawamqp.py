"""A tiny raw AMQP 0-9-1 client on a plain blocking socket, for tests.

Real client libraries refuse to send malformed or out-of-order frames; this one
sends whatever it is told to. Frames are built and parsed with pamqp.

    with RawClient.connect(host, port) as c:
        tune = c.handshake()                         # start/start-ok/tune/tune-ok/open
        c.open_channel(1)
        c.rpc(1, commands.Queue.Declare(queue="q"), commands.Queue.DeclareOk)
        c.publish(1, b"body", routing_key="q")       # publish + header + body frames
        c.rpc(1, commands.Basic.Get(queue="q"), commands.Basic.GetOk)
        content_header, chunks = c.read_content(1)   # header + payload of each body frame
        frame_type, channel, payload = c.read_raw_frame()  # undecoded
        c.send_method(1, commands.Queue.Declare(queue="nope", passive=True))
        close = c.expect(commands.Channel.Close, channel=1)  # -> pamqp method object
        c.send_raw(build_frame(7, 1, b"abc"))        # arbitrary bytes
        close = c.expect_connection_close()          # answers close-ok for you
        assert c.wait_closed(timeout=5)              # server closed the socket

Helpers: build_frame (any type/payload/frame-end), method_payload (any class/method
id), frames_until_closed (everything the server sends until it hangs up).

Every read has a timeout; `read_frame` raises TimeoutError when nothing
arrives in time and ConnectionClosedError when the server closes the socket.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from types import TracebackType
from typing import Any, TypeVar

from pamqp import body, commands, encode, frame, header, heartbeat
from pamqp.base import Frame

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_END = b"\xce"
DEFAULT_TIMEOUT = 5.0

AnyFrame = (
    Frame | header.ContentHeader | body.ContentBody | header.ProtocolHeader | heartbeat.Heartbeat
)
M = TypeVar("M", bound=AnyFrame)


class ConnectionClosedError(Exception):
    """The server closed the socket (EOF or reset)."""


class UnexpectedFrameError(AssertionError):
    """`expect` received a frame other than the one asked for."""


def build_frame(frame_type: int, channel: int, payload: bytes, end: bytes = FRAME_END) -> bytes:
    """Bytes of one frame with an arbitrary type, payload and frame-end octet."""
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + end


def method_payload(class_id: int, method_id: int, arguments: bytes = b"") -> bytes:
    """Payload of a method frame for any class/method id, known or not."""
    return struct.pack(">HH", class_id, method_id) + arguments


def plain_response(username: str, password: str) -> str:
    return f"\0{username}\0{password}"


def amqplain_response(username: str, password: str) -> str:
    """AMQPLAIN response: a field table without its length prefix (ASCII credentials)."""
    table = encode.field_table({"LOGIN": username, "PASSWORD": password})
    return table[4:].decode("latin-1")


class RawClient:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""
        self._eof = False
        self.start: commands.Connection.Start | None = None
        self.tune: commands.Connection.Tune | None = None  # what the server proposed
        self.tune_ok: commands.Connection.TuneOk | None = None  # what we answered

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def connect(cls, host: str, port: int, timeout: float = DEFAULT_TIMEOUT) -> RawClient:
        """Open the TCP connection only; nothing is sent yet."""
        return cls(socket.create_connection((host, port), timeout=timeout))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- sending -----------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_protocol_header(self, data: bytes = PROTOCOL_HEADER) -> None:
        self.send_raw(data)

    def send_frame(self, channel: int, value: AnyFrame) -> None:
        """Send one pamqp frame object (method, content header, body or heartbeat)."""
        self.send_raw(frame.marshal(value, channel))

    def send_method(self, channel: int, method: Frame) -> None:
        self.send_frame(channel, method)

    def send_heartbeat(self) -> None:
        self.send_frame(0, heartbeat.Heartbeat())

    def publish(
        self,
        channel: int,
        body_bytes: bytes,
        exchange: str = "",
        routing_key: str = "",
        properties: commands.Basic.Properties | None = None,
        mandatory: bool = False,
    ) -> None:
        """basic.publish + content header + body frames, in a single write. The body is
        split at the negotiated frame_max - 8 (131072 - 8 before tuning)."""
        method = commands.Basic.Publish(
            exchange=exchange, routing_key=routing_key, mandatory=mandatory
        )
        content = header.ContentHeader(
            0, len(body_bytes), properties or commands.Basic.Properties()
        )
        negotiated = self.tune_ok.frame_max if self.tune_ok is not None else 0
        step = (negotiated or 131072) - 8
        parts = [frame.marshal(method, channel), frame.marshal(content, channel)]
        for offset in range(0, len(body_bytes), step):
            chunk = body_bytes[offset : offset + step]
            parts.append(frame.marshal(body.ContentBody(chunk), channel))
        self.send_raw(b"".join(parts))

    # -- receiving ---------------------------------------------------------------------------

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no frame from the server in time")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise TimeoutError("no frame from the server in time") from None
        except (ConnectionResetError, BrokenPipeError) as error:
            self._eof = True
            raise ConnectionClosedError(str(error)) from error
        if not chunk:
            self._eof = True
            raise ConnectionClosedError("server closed the connection")
        self._buffer += chunk

    def read_frame(
        self, timeout: float = DEFAULT_TIMEOUT, skip_heartbeats: bool = True
    ) -> tuple[int, AnyFrame]:
        """Next (channel, frame) from the server; a protocol header comes back as
        pamqp.header.ProtocolHeader on channel 0."""
        deadline = time.monotonic() + timeout
        while True:
            while not self._buffer:
                self._fill(deadline)
            if self._buffer[:1] == b"A":  # no frame type is 0x41: a protocol header
                while len(self._buffer) < 8:
                    self._fill(deadline)
                raw, self._buffer = self._buffer[:8], self._buffer[8:]
                return 0, frame.unmarshal(raw)[2]
            while len(self._buffer) < 7:
                self._fill(deadline)
            _, channel, size = struct.unpack(">BHI", self._buffer[:7])
            while len(self._buffer) < 7 + size + 1:
                self._fill(deadline)
            raw, self._buffer = self._buffer[: 8 + size], self._buffer[8 + size :]
            _, channel, value = frame.unmarshal(raw)
            if skip_heartbeats and isinstance(value, heartbeat.Heartbeat):
                continue
            return channel, value

    def read_raw_frame(self, timeout: float = DEFAULT_TIMEOUT) -> tuple[int, int, bytes]:
        """Next frame as (type, channel, payload), undecoded: for content that pamqp's
        decoder would choke on (say, deeply nested headers)."""
        deadline = time.monotonic() + timeout
        while len(self._buffer) < 7:
            self._fill(deadline)
        frame_type, channel, size = struct.unpack(">BHI", self._buffer[:7])
        while len(self._buffer) < 8 + size:
            self._fill(deadline)
        payload, self._buffer = self._buffer[7 : 7 + size], self._buffer[8 + size :]
        return frame_type, channel, payload

    def expect(
        self, kind: type[M], channel: int | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> M:
        """Read the next frame and check it is a `kind` (on `channel` if given)."""
        got_channel, value = self.read_frame(timeout)
        if not isinstance(value, kind) or (channel is not None and got_channel != channel):
            raise UnexpectedFrameError(
                f"expected {kind.__name__} on channel {channel}, got {describe(value)} "
                f"on channel {got_channel}"
            )
        return value

    def read_raw(self, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        """Every byte the server sends until it closes the socket (or the timeout)."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self._fill(deadline)
        except (ConnectionClosedError, TimeoutError):
            pass
        data, self._buffer = self._buffer, b""
        return data

    def wait_closed(self, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """True once the server closes the socket; frames read meanwhile are dropped."""
        deadline = time.monotonic() + timeout
        while not self._eof:
            try:
                self._fill(deadline)
            except ConnectionClosedError:
                return True
            except TimeoutError:
                return False
            self._buffer = b""
        return True

    def frames_until_closed(
        self, timeout: float = DEFAULT_TIMEOUT, answer_close: bool = True
    ) -> list[AnyFrame] | None:
        """Every frame (heartbeats included) until the server closes the socket, or
        None if it is still open after `timeout`. connection.close is answered with
        close-ok unless answer_close=False."""
        deadline = time.monotonic() + timeout
        seen: list[AnyFrame] = []
        while True:
            try:
                _, value = self.read_frame(deadline - time.monotonic(), skip_heartbeats=False)
            except ConnectionClosedError:
                return seen
            except TimeoutError:
                return None
            seen.append(value)
            if answer_close and isinstance(value, commands.Connection.Close):
                with contextlib.suppress(OSError):
                    self.send_method(0, commands.Connection.CloseOk())

    def expect_connection_close(
        self, timeout: float = DEFAULT_TIMEOUT
    ) -> commands.Connection.Close:
        """Read until connection.close (skipping other frames), answer close-ok, return it."""
        deadline = time.monotonic() + timeout
        while True:
            _, value = self.read_frame(max(deadline - time.monotonic(), 0.001))
            if isinstance(value, commands.Connection.Close):
                with contextlib.suppress(OSError):
                    self.send_method(0, commands.Connection.CloseOk())
                return value

    # -- conversations -----------------------------------------------------------------------

    def handshake(
        self,
        username: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        mechanism: str = "PLAIN",
        channel_max: int | None = None,
        frame_max: int | None = None,
        heartbeat: int = 0,
        client_properties: dict[str, Any] | None = None,
        open_connection: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        protocol_header: bytes = PROTOCOL_HEADER,
    ) -> commands.Connection.Tune:
        """Protocol header, start-ok, tune-ok and (unless open_connection=False)
        connection.open / open-ok. None for channel_max/frame_max accepts the
        server's proposal. Returns the server's connection.tune."""
        self.send_protocol_header(protocol_header)
        self.start = self.expect(commands.Connection.Start, 0, timeout)
        if mechanism == "AMQPLAIN":
            response = amqplain_response(username, password)
        else:
            response = plain_response(username, password)
        if client_properties is None:
            client_properties = {
                "product": "kanin-rawamqp",
                "capabilities": {"authentication_failure_close": True},
            }
        self.send_method(
            0,
            commands.Connection.StartOk(
                client_properties=client_properties, mechanism=mechanism, response=response
            ),
        )
        self.tune = self.expect(commands.Connection.Tune, 0, timeout)
        self.tune_ok = commands.Connection.TuneOk(
            channel_max=self.tune.channel_max if channel_max is None else channel_max,
            frame_max=self.tune.frame_max if frame_max is None else frame_max,
            heartbeat=heartbeat,
        )
        self.send_method(0, self.tune_ok)
        if open_connection:
            self.send_method(0, commands.Connection.Open(virtual_host=vhost))
            self.expect(commands.Connection.OpenOk, 0, timeout)
        return self.tune

    def open_channel(self, channel: int, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.send_method(channel, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk, channel, timeout)

    def rpc(
        self, channel: int, method: Frame, reply: type[M], timeout: float = DEFAULT_TIMEOUT
    ) -> M:
        """Send a synchronous method and expect its reply on the same channel."""
        self.send_method(channel, method)
        return self.expect(reply, channel, timeout)

    def read_content(
        self, channel: int, timeout: float = DEFAULT_TIMEOUT
    ) -> tuple[header.ContentHeader, list[bytes]]:
        """After basic.deliver / basic.get-ok / basic.return: the content header and
        the payload of each body frame, in order."""
        content = self.expect(header.ContentHeader, channel, timeout)
        chunks: list[bytes] = []
        while sum(len(chunk) for chunk in chunks) < content.body_size:
            chunks.append(self.expect(body.ContentBody, channel, timeout).value)
        return content, chunks

    def close_connection(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Client-initiated connection.close; waits for close-ok."""
        self.send_method(
            0,
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
        )
        self.expect(commands.Connection.CloseOk, 0, timeout)


def describe(value: object) -> str:
    name = getattr(value, "name", type(value).__name__)
    if isinstance(value, commands.Connection.Close | commands.Channel.Close):
        return f"{name}({value.reply_code} {value.reply_text!r})"
    return str(name)


__all__ = [
    "DEFAULT_TIMEOUT",
    "FRAME_END",
    "PROTOCOL_HEADER",
    "ConnectionClosedError",
    "RawClient",
    "UnexpectedFrameError",
    "amqplain_response",
    "build_frame",
    "describe",
    "method_payload",
    "plain_response",
]
