"""Holds idle AMQP state open on a broker while bench/compare.py reads the broker's memory.

    python bench/idle_clients.py connections URI COUNT        # COUNT connections, 1 channel each
    python bench/idle_clients.py queues URI COUNT PREFIX      # COUNT empty queues PREFIX0...

Prints `ready COUNT` once everything is open, then waits until stdin closes (or gets a
line), undoes what it did (closes the connections, deletes the queues) and prints `done`.
A separate process so that the client's own sockets and memory stay out of the figures.
It uses kanin perf's client, so it runs from the same source snapshot as the rest.
"""

from __future__ import annotations

import asyncio
import resource
import sys

from pamqp import commands

from kanin.perf import wire
from kanin.perf.client import ChannelHandler, Connection, connect
from kanin.perf.options import parse_uri

CONNECT_CONCURRENCY = 50  # handshakes in flight at once: fast, without a SYN flood
DECLARE_CHUNK = 500  # nowait declares/deletes between two synchronous round trips


async def open_connections(uri: str, count: int) -> list[Connection]:
    endpoint = parse_uri(uri)
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def one() -> Connection:
        async with gate:
            conn = await connect(endpoint)
            await conn.open_channel(ChannelHandler(conn, 1))
            return conn

    opened = await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
    connections = [conn for conn in opened if isinstance(conn, Connection)]
    failed = [result for result in opened if not isinstance(result, Connection)]
    if failed:  # e.g. RabbitMQ stalls handshakes beyond its socket limit
        await asyncio.gather(*(conn.close() for conn in connections))
        raise RuntimeError(f"{len(failed)} of {count} connections failed: {failed[0]}")
    return connections


async def each_queue(channel: ChannelHandler, names: list[str], declare: bool) -> None:
    """Declare (or delete) every queue with nowait, syncing every DECLARE_CHUNK.

    Waiting for each declare-ok would make this a 10,000-round-trip test of latency;
    nowait keeps the broker busy, and a basic.qos round trip after each chunk both
    bounds what is buffered and proves the broker has processed the chunk.
    """
    for start in range(0, len(names), DECLARE_CHUNK):
        for name in names[start : start + DECLARE_CHUNK]:
            method = (
                commands.Queue.Declare(queue=name, nowait=True)
                if declare
                else commands.Queue.Delete(queue=name, nowait=True)
            )
            channel.conn.write(wire.method_frame(channel.number, method))
        await channel.call(commands.Basic.Qos(prefetch_count=0), commands.Basic.QosOk)


async def wait_for_release() -> None:
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def hold_connections(uri: str, count: int) -> None:
    connections = await open_connections(uri, count)
    print(f"ready {len(connections)}", flush=True)
    await wait_for_release()
    await asyncio.gather(*(conn.close() for conn in connections))


async def hold_queues(uri: str, count: int, prefix: str) -> None:
    conn = await connect(parse_uri(uri))
    channel = ChannelHandler(conn, 1)
    await conn.open_channel(channel)
    names = [f"{prefix}{index}" for index in range(count)]
    try:
        await each_queue(channel, names, declare=True)
        print(f"ready {count}", flush=True)
        await wait_for_release()
    finally:
        await each_queue(channel, names, declare=False)
        await conn.close()


def main() -> int:
    # One socket per connection: lift the soft open-files limit to the hard one.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    kind, uri, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        if kind == "connections":
            asyncio.run(hold_connections(uri, count))
        elif kind == "queues":
            asyncio.run(hold_queues(uri, count, sys.argv[4]))
        else:
            raise SystemExit(f"unknown kind {kind!r}: connections or queues")
    except Exception as exc:  # the parent reads stdout: say why on it, in one line
        print(f"error {type(exc).__name__}: {exc}", flush=True)
        return 1
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
