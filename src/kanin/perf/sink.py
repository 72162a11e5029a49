"""A do-nothing broker for `kanin perf --self-test`: how fast can perf itself go?

It answers the handshake and every declaration with OK, confirms each publish as soon
as it has read it, and hands each message straight to a consumer of the queue named
by its routing key (round robin), holding nothing: no queue, no disk, no acks. When a
consumer's socket backs up, it stops reading from publishers. Messages for a queue with
no consumer are dropped. It runs in its own process, so perf measured against it shows
perf's own ceiling on this machine (the sink is in Python too; see its CPU figure).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection as Pipe
from typing import Any, cast

from pamqp import commands

from kanin.perf import wire

_PUBLISH = 0x003C0028


class Sink:
    def __init__(self) -> None:
        self.consumers: dict[str, list[tuple[SinkConnection, int, bytes]]] = {}
        self.turn: dict[str, Iterator[tuple[SinkConnection, int, bytes]]] = {}
        self.publishers: set[SinkConnection] = set()
        self.congested: set[SinkConnection] = set()

    def add_consumer(self, queue: str, conn: SinkConnection, channel: int, tag: bytes) -> None:
        self.consumers.setdefault(queue, []).append((conn, channel, tag))
        self.turn[queue] = itertools.cycle(self.consumers[queue])

    def drop(self, conn: SinkConnection) -> None:
        self.publishers.discard(conn)
        self.congested.discard(conn)
        for queue, entries in list(self.consumers.items()):
            kept = [entry for entry in entries if entry[0] is not conn]
            self.consumers[queue] = kept
            self.turn[queue] = itertools.cycle(kept)
        self.resume_if_clear()

    def congestion(self, conn: SinkConnection, congested: bool) -> None:
        if congested:
            self.congested.add(conn)
            for publisher in self.publishers:
                publisher.pause()
        else:
            self.congested.discard(conn)
            self.resume_if_clear()

    def resume_if_clear(self) -> None:
        if not self.congested:
            for publisher in self.publishers:
                publisher.resume()


class SinkConnection(asyncio.Protocol):
    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.transport: asyncio.Transport | None = None
        self.pending = b""
        self.greeted = False
        self.confirming: dict[int, int] = {}  # channel -> publish sequence so far
        self.targets: dict[int, str] = {}  # channel -> queue of the message being read
        self.delivery_tags: dict[int, int] = {}
        self.routes: dict[bytes, str] = {}  # basic.publish payload -> queue
        self.out: list[bytes] = []
        self.paused = False
        self.current: dict[str, tuple[SinkConnection, int, bytes] | None] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.sink.drop(self)

    def pause_writing(self) -> None:
        self.sink.congestion(self, True)

    def resume_writing(self) -> None:
        self.sink.congestion(self, False)

    def pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def send(self, channel: int, method: Any) -> None:
        self.out.append(wire.method_frame(channel, method))

    def data_received(self, data: bytes) -> None:
        buffer = self.pending + data if self.pending else data
        position = 0
        if not self.greeted:
            if len(buffer) < 8:
                self.pending = buffer
                return
            self.greeted = True
            position = 8
            self.send(0, commands.Connection.Start())
        flushed: set[SinkConnection] = set()
        confirmed: dict[int, int] = {}
        end_of_data = len(buffer)
        while end_of_data - position >= wire.FRAME_OVERHEAD:
            frame_type, channel, size = wire.HEAD.unpack_from(buffer, position)
            end = position + 7 + size
            if end >= end_of_data:
                break
            if frame_type == wire.FRAME_METHOD:
                if wire.U32.unpack_from(buffer, position + 7)[0] == _PUBLISH:
                    payload = buffer[position + 7 : end]
                    queue = self.routes.get(payload)
                    if queue is None:
                        queue = self.routes[payload] = wire.decode_method(
                            buffer[position : end + 1]
                        ).routing_key
                    self.targets[channel] = queue
                    if channel in self.confirming:
                        self.confirming[channel] += 1
                        confirmed[channel] = self.confirming[channel]
                else:
                    self._method(channel, wire.decode_method(buffer[position : end + 1]))
            elif frame_type in (wire.FRAME_HEADER, wire.FRAME_BODY):
                queue = self.targets.get(channel)
                if queue is not None:
                    self._forward(queue, frame_type, buffer, position, end, flushed)
            position = end + 1
        self.pending = buffer[position:]
        for channel, seq in confirmed.items():
            self.out.append(
                wire.HEAD.pack(1, channel, 13)
                + b"\x00\x3c\x00\x50"
                + wire.TAG_BITS.pack(seq, 1)
                + b"\xce"
            )
        flushed.add(self)
        for conn in flushed:
            conn.flush()

    def _forward(
        self, queue: str, kind: int, buffer: bytes, start: int, end: int, flushed: set[Any]
    ) -> None:
        if kind == wire.FRAME_HEADER:  # a new message: pick its consumer
            turn = self.sink.turn.get(queue)
            entry = next(turn, None) if turn is not None else None
            self.current[queue] = entry
            if entry is None:
                return  # no consumer: dropped
            conn, channel, tag = entry
            delivery = conn.delivery_tags.get(channel, 0) + 1
            conn.delivery_tags[channel] = delivery
            method = b"".join(
                (
                    b"\x00\x3c\x00\x3c",
                    wire.short_string(tag.decode()),
                    wire.TAG_BITS.pack(delivery, 0),
                    b"\x00",
                    wire.short_string(queue),
                )
            )
            conn.out.append(wire.frame(wire.FRAME_METHOD, channel, method))
        entry = self.current.get(queue)
        if entry is None:
            return
        conn, channel, _ = entry
        head = wire.HEAD.pack(kind, channel, end - start - 7)
        conn.out.append(head + buffer[start + 7 : end + 1])
        flushed.add(conn)

    def flush(self) -> None:
        if self.out and self.transport is not None:
            self.transport.write(b"".join(self.out))
            self.out.clear()

    def _method(self, channel: int, method: Any) -> None:
        c = commands
        replies: dict[type, Any] = {
            c.Connection.StartOk: c.Connection.Tune(2047, 131072, 0),
            c.Connection.Open: c.Connection.OpenOk(),
            c.Channel.Open: c.Channel.OpenOk(),
            c.Channel.Close: c.Channel.CloseOk(),
            c.Exchange.Declare: c.Exchange.DeclareOk(),
            c.Queue.Bind: c.Queue.BindOk(),
            c.Queue.Purge: c.Queue.PurgeOk(0),
            c.Queue.Delete: c.Queue.DeleteOk(0),
            c.Basic.Qos: c.Basic.QosOk(),
            c.Confirm.Select: c.Confirm.SelectOk(),
        }
        if isinstance(method, c.Queue.Declare):
            self.send(channel, c.Queue.DeclareOk(method.queue or "amq.gen-sink", 0, 0))
        elif isinstance(method, c.Basic.Consume):
            tag = method.consumer_tag or f"sink-{id(self)}-{channel}"
            self.send(channel, c.Basic.ConsumeOk(consumer_tag=tag))
            self.sink.add_consumer(method.queue, self, channel, tag.encode())
        elif isinstance(method, c.Connection.Close):
            self.send(0, c.Connection.CloseOk())
            self.flush()
            if self.transport is not None:
                self.transport.close()
        elif type(method) in replies:
            self.send(channel, replies[type(method)])
            if isinstance(method, c.Confirm.Select):
                self.confirming[channel] = 0
            if isinstance(method, c.Connection.Open):
                self.sink.publishers.add(self)
        # basic.ack / nack / reject / cancel and anything else: ignored


@dataclass
class SinkHandle:
    port: int
    cpu_percent: float | None = None  # filled in when the sink stops


@contextmanager
def running_sink() -> Iterator[SinkHandle]:
    """Run a sink in its own process on 127.0.0.1 (a free port) for the with block."""
    context = get_context("spawn")
    parent_end, child_end = context.Pipe()
    process = context.Process(target=_sink_process, args=(child_end,), daemon=True)
    process.start()
    child_end.close()
    try:
        if not parent_end.poll(30.0):
            raise OSError("the self-test sink did not start")
        handle = SinkHandle(port=int(parent_end.recv()))
        yield handle
        parent_end.send("stop")
        if parent_end.poll(10.0):
            handle.cpu_percent = float(parent_end.recv())
    finally:
        process.join(timeout=5.0)
        if process.is_alive():
            process.terminate()
            process.join(timeout=5.0)


def _sink_process(pipe: Pipe) -> None:
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(_serve(pipe))


async def _serve(pipe: Pipe) -> None:
    loop = asyncio.get_running_loop()
    sink = Sink()
    server = await loop.create_server(lambda: SinkConnection(sink), "127.0.0.1", 0)
    cpu_start, wall_start = time.process_time(), time.monotonic()
    stop = asyncio.Event()
    loop.add_reader(pipe.fileno(), stop.set)
    pipe.send(server.sockets[0].getsockname()[1])
    await stop.wait()
    server.close()
    wall = time.monotonic() - wall_start
    pipe.send(round(100.0 * (time.process_time() - cpu_start) / wall, 1) if wall else 0.0)
