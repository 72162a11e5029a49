"""Declaring (and afterwards deleting) the queues and exchange a perf run uses."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from kanin.perf.client import ChannelHandler, connect
from kanin.perf.options import PerfOptions


async def declare(options: PerfOptions) -> None:
    conn = await connect(options.endpoint)
    try:
        channel = ChannelHandler(conn, 1)
        await conn.open_channel(channel)
        if options.exchange:
            exchange = commands.Exchange.Declare(
                exchange=options.exchange,
                exchange_type=options.exchange_type,
                durable=options.durable,
                arguments=dict(options.exchange_args) or None,
            )
            await channel.call(exchange, commands.Exchange.DeclareOk)
        arguments: dict[str, Any] = dict(options.queue_args)
        for name in options.queue_names:
            queue = commands.Queue.Declare(
                queue=name, durable=options.durable, arguments=arguments or None
            )
            await channel.call(queue, commands.Queue.DeclareOk)
            if options.exchange:
                bind = commands.Queue.Bind(queue=name, exchange=options.exchange, routing_key=name)
                await channel.call(bind, commands.Queue.BindOk)
            if options.purge:
                await channel.call(commands.Queue.Purge(queue=name), commands.Queue.PurgeOk)
    finally:
        await conn.close()


async def delete(options: PerfOptions) -> None:
    conn = await connect(options.endpoint)
    try:
        channel = ChannelHandler(conn, 1)
        await conn.open_channel(channel)
        for name in options.queue_names:
            await channel.call(commands.Queue.Delete(queue=name), commands.Queue.DeleteOk)
    finally:
        await conn.close()


async def message_count(options: PerfOptions, queue: str) -> int:
    """How many messages queue holds (a passive declare)."""
    conn = await connect(options.endpoint)
    try:
        channel = ChannelHandler(conn, 1)
        await conn.open_channel(channel)
        ok = await channel.call(
            commands.Queue.Declare(queue=queue, passive=True), commands.Queue.DeclareOk
        )
        return int(ok.message_count)
    finally:
        await conn.close()
