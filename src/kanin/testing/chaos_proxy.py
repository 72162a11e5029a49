"""A TCP proxy that misbehaves on purpose, for fault tests of clients and broker.

It listens on 127.0.0.1 (port 0) and forwards each connection to `target`, which may
change at any time (a broker restarted on another port). With `faults` on, every chunk
it forwards, in either direction, may at random be delayed (the stream stays in
order), or be dropped along with everything after it on that connection for a while
before the connection is cut (a stall), or the connection is cut at once. `cut_all`
cuts every open connection. Faults are drawn from the given random.Random, so a failing
run can be repeated with its seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass


@dataclass
class Faults:
    """Chances per forwarded chunk, and how long delays and stalls last."""

    cut: float = 0.0
    stall: float = 0.0
    delay: float = 0.0
    max_delay_s: float = 0.05
    stall_s: float = 1.0


class ChaosProxy:
    def __init__(self, target: tuple[str, int], rng: random.Random | None = None) -> None:
        self.target = target
        self.rng = rng or random.Random(0)
        self.faults: Faults | None = None
        self.port = 0
        self.cuts = 0  # connections cut, by faults or cut_all
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        self.cut_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut_all(self) -> None:
        for pair in list(self._pairs):
            self._cut(pair)

    def _cut(self, pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter]) -> None:
        if pair in self._pairs:
            self._pairs.discard(pair)
            self.cuts += 1
        for writer in pair:
            writer.transport.abort()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()  # the broker is down: the client sees a refusal
            return
        pair = (writer, upstream_writer)
        self._pairs.add(pair)
        await asyncio.gather(
            self._pump(reader, upstream_writer, pair), self._pump(upstream_reader, writer, pair)
        )

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while pair in self._pairs:
                data = await reader.read(65536)
                if not data:
                    break
                faults = self.faults
                if faults is not None:
                    draw = self.rng.random()
                    if draw < faults.cut:
                        break
                    if draw < faults.cut + faults.stall:
                        await asyncio.sleep(faults.stall_s)  # this and what follows: lost
                        break
                    if draw < faults.cut + faults.stall + faults.delay:
                        await asyncio.sleep(self.rng.uniform(0, faults.max_delay_s))
                writer.write(data)
                await writer.drain()
        self._cut(pair)
