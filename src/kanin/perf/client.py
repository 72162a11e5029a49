"""A minimal AMQP 0-9-1 client on a raw asyncio protocol, built for kanin perf.

Rules of this file: data_received cuts frames out of the byte stream itself and hands
the hot ones (basic.deliver, content body, basic.ack, basic.nack) straight to the
channel's handler with the buffer and an offset, without building objects. Everything
else is rare and goes through pamqp. Frames a handler wants to send while reading
(consumer acks) go to `out`, written with one transport.write when the read is done.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from pamqp import commands

from kanin.perf import wire
from kanin.perf.options import Endpoint

CLIENT_FRAME_MAX = 131072
_CAPABILITIES: dict[str, Any] = {
    "publisher_confirms": True,
    "consumer_cancel_notify": True,
    "basic.nack": True,
    "connection.blocked": True,
}


class PerfError(Exception):
    """The broker closed a channel or the connection, or did not answer in time."""


class ChannelHandler:
    """One channel. Subclasses override the hot-path hooks they need."""

    def __init__(self, conn: Connection, number: int) -> None:
        self.conn = conn
        self.number = number
        self._reply: asyncio.Future[Any] | None = None

    def on_deliver(self, buffer: bytes, at: int) -> None:
        """A basic.deliver method; at is where its payload starts in buffer."""

    def on_header(self, buffer: bytes, at: int, end: int) -> None:
        """A content header frame; its payload is buffer[at:end]."""

    def on_body(self, buffer: bytes, at: int) -> None:
        """A content body frame; at is where its payload starts in buffer."""

    def on_ack(self, tag: int, multiple: bool) -> None:
        """A publisher confirm."""

    def on_nack(self, tag: int, multiple: bool) -> None:
        """A negative publisher confirm."""

    def on_method(self, method: Any) -> None:
        if isinstance(method, commands.Channel.Close):
            self.conn.write(wire.method_frame(self.number, commands.Channel.CloseOk()))
            self.conn.fail(
                f"channel {self.number} closed by broker: {method.reply_code} {method.reply_text}"
            )
        elif isinstance(method, commands.Basic.Cancel):
            self.conn.fail(f"consumer {method.consumer_tag} cancelled by the broker")
        elif self._reply is not None and not self._reply.done():
            self._reply.set_result(method)

    def fail(self, error: PerfError) -> None:
        if self._reply is not None and not self._reply.done():
            self._reply.set_exception(error)

    async def call(self, method: Any, reply: type) -> Any:
        """Send a synchronous method and wait for its reply (10 s at most)."""
        self._reply = asyncio.get_running_loop().create_future()
        self.conn.write(wire.method_frame(self.number, method))
        try:
            answer = await asyncio.wait_for(self._reply, 10.0)
        except TimeoutError as exc:
            raise PerfError(f"no answer to {type(method).__name__} within 10 s") from exc
        finally:
            self._reply = None
        if not isinstance(answer, reply):
            raise PerfError(f"expected {reply.__name__}, got {type(answer).__name__}")
        return answer


class Connection(asyncio.Protocol):
    def __init__(self, endpoint: Endpoint, loop: asyncio.AbstractEventLoop) -> None:
        self.endpoint = endpoint
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self.channels: dict[int, ChannelHandler] = {}
        self.out: list[bytes] = []
        self.frame_max = CLIENT_FRAME_MAX
        self.error: str | None = None
        self.closing = False  # we said connection.close: what follows is not an error
        self.blocked = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._pending = b""
        self._heartbeat: asyncio.TimerHandle | None = None
        self._heartbeat_s = 0

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.write(wire.PROTOCOL_HEADER)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if not self.lost.done():
            self.lost.set_result(None)
        self.fail(f"connection lost: {exc}" if exc else "connection closed")
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        buffer = self._pending + data if self._pending else data
        end_of_data = len(buffer)
        channels = self.channels
        unpack_head = wire.HEAD.unpack_from
        unpack_u32 = wire.U32.unpack_from
        position = 0
        while end_of_data - position >= wire.FRAME_OVERHEAD:
            frame_type, number, size = unpack_head(buffer, position)
            at = position + 7
            end = at + size
            if end >= end_of_data:
                break
            if buffer[end] != wire.FRAME_END:
                self.fail("frame without its end octet: lost track of the stream")
                if self.transport is not None:
                    self.transport.abort()
                return
            if frame_type == wire.FRAME_BODY:
                channels[number].on_body(buffer, at)
            elif frame_type == wire.FRAME_HEADER:
                channels[number].on_header(buffer, at, end)
            elif frame_type == wire.FRAME_METHOD:
                method_id = unpack_u32(buffer, at)[0]
                if method_id == wire.BASIC_DELIVER:
                    channels[number].on_deliver(buffer, at)
                elif method_id == wire.BASIC_ACK:
                    tag, bits = wire.TAG_BITS.unpack_from(buffer, at + 4)
                    channels[number].on_ack(tag, bool(bits & 1))
                elif method_id == wire.BASIC_NACK:
                    tag, bits = wire.TAG_BITS.unpack_from(buffer, at + 4)
                    channels[number].on_nack(tag, bool(bits & 1))
                else:
                    self._slow_method(number, buffer[position : end + 1])
            position = end + 1
        self._pending = buffer[position:]
        if self.out:
            self.write(b"".join(self.out))
            self.out.clear()

    # -- sending -----------------------------------------------------------------------
    def write(self, data: bytes | bytearray) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    @property
    def writable(self) -> bool:
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    def fail(self, error: str) -> None:
        """Record the first error and wake everything waiting on this connection."""
        if self.closing:
            return
        if self.error is None:
            self.error = error
        problem = PerfError(self.error)
        if not self.ready.done():
            self.ready.set_exception(problem)
        for channel in self.channels.values():
            channel.fail(problem)

    # -- the slow path: handshake and rare methods --------------------------------------
    def _slow_method(self, number: int, raw: bytes) -> None:
        method = wire.decode_method(raw)
        if number != 0:
            handler = self.channels.get(number)
            if handler is not None:
                handler.on_method(method)
            return
        if isinstance(method, commands.Connection.Start):
            response = f"\0{self.endpoint.user}\0{self.endpoint.password}"
            properties: dict[str, Any] = {"product": "kanin perf", "capabilities": _CAPABILITIES}
            start_ok = commands.Connection.StartOk(
                client_properties=properties, mechanism="PLAIN", response=response
            )
            self.write(wire.method_frame(0, start_ok))
        elif isinstance(method, commands.Connection.Tune):
            frame_max = min(method.frame_max or CLIENT_FRAME_MAX, CLIENT_FRAME_MAX)
            self.frame_max = frame_max
            self._heartbeat_s = method.heartbeat
            tune_ok = commands.Connection.TuneOk(
                channel_max=method.channel_max, frame_max=frame_max, heartbeat=method.heartbeat
            )
            self.write(wire.method_frame(0, tune_ok))
            open_ = commands.Connection.Open(virtual_host=self.endpoint.vhost)
            self.write(wire.method_frame(0, open_))
        elif isinstance(method, commands.Connection.OpenOk):
            if self._heartbeat_s:
                self._beat()
            if not self.ready.done():
                self.ready.set_result(None)
        elif isinstance(method, commands.Connection.Close):
            self.write(wire.method_frame(0, commands.Connection.CloseOk()))
            self.fail(f"connection closed by broker: {method.reply_code} {method.reply_text}")
        elif isinstance(method, commands.Connection.CloseOk):
            if self.transport is not None:
                self.transport.close()
        elif isinstance(method, commands.Connection.Blocked):
            self.blocked = True
        elif isinstance(method, commands.Connection.Unblocked):
            self.blocked = False

    def _beat(self) -> None:
        self.write(wire.HEARTBEAT_FRAME)
        self._heartbeat = self.loop.call_later(self._heartbeat_s / 2, self._beat)

    # -- channels and closing ----------------------------------------------------------
    async def open_channel(self, handler: ChannelHandler) -> None:
        self.channels[handler.number] = handler
        await handler.call(commands.Channel.Open(), commands.Channel.OpenOk)

    async def close(self, timeout_s: float = 2.0) -> None:
        if self.transport is None or self.lost.done():
            return
        if self.error is None and not self.closing:
            self.closing = True
            closing = commands.Connection.Close(200, "kanin perf done", 0, 0)
            self.write(wire.method_frame(0, closing))
        try:
            await asyncio.wait_for(asyncio.shield(self.lost), timeout_s)
        except TimeoutError:
            self.transport.abort()


async def connect(endpoint: Endpoint, timeout_s: float = 10.0) -> Connection:
    loop = asyncio.get_running_loop()
    _, protocol = await asyncio.wait_for(
        loop.create_connection(lambda: Connection(endpoint, loop), endpoint.host, endpoint.port),
        timeout_s,
    )
    try:
        await asyncio.wait_for(asyncio.shield(protocol.ready), timeout_s)
    except TimeoutError as exc:
        if protocol.transport is not None:
            protocol.transport.abort()
        raise PerfError(f"no AMQP handshake with {endpoint.host}:{endpoint.port}") from exc
    return protocol
