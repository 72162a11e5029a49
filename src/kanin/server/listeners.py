"""The broker's listening sockets: AMQP, plain and over TLS (amqps), and the HTTP ones
(management API, Prometheus metrics), plain or HTTPS. Each logs the addresses it listens
on, and a port it cannot have is an error naming it."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from kanin.config import BrokerConfig
from kanin.core.broker import Broker
from kanin.errors import StartupError
from kanin.mgmt.context import MgmtContext
from kanin.mgmt.server import MgmtServer
from kanin.server.connection import AMQPConnection
from kanin.server.tls_accept import TlsListener, listening_sockets

log = logging.getLogger("kanin.server.app")

Address = tuple[str, int]


class Listener(Protocol):
    """What the broker keeps of a listener: asyncio.Server, or amqps' TlsListener."""

    @property
    def sockets(self) -> Sequence[SocketLike]: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


class SocketLike(Protocol):
    def getsockname(self) -> Any: ...


BACKLOG = 1024


async def listen_amqp(
    broker: Broker, config: BrokerConfig, tls: ssl.SSLContext | None = None
) -> Listener:
    """The AMQP listener on config.port, or the amqps one on config.tls_port with `tls`
    (server/tls_accept.py: kanin runs the handshakes, to log those that fail; the session's
    own handshake timer starts once TLS is up)."""
    bind, port = config.bind, config.tls_port if tls is not None else config.port
    server: Listener
    try:
        if tls is None:
            server = await asyncio.get_running_loop().create_server(
                lambda: AMQPConnection(broker),
                host=bind,
                port=port,
                reuse_address=True,
                backlog=BACKLOG,
            )
        else:
            sockets = listening_sockets(bind, port, BACKLOG)
            timeout_s = config.handshake_timeout_s
            server = TlsListener(sockets, lambda: AMQPConnection(broker), tls, timeout_s)
    except socket.gaierror as exc:
        raise StartupError(f"bind address {bind!r} does not resolve: {exc.strerror}") from None
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            raise StartupError(
                f"bind address {bind!r} is not on this host: {exc.strerror}"
            ) from None
        if tls is None:
            raise  # port in use and the like: the caller reports it as it is (it names it)
        raise OSError(exc.errno, f"AMQP TLS port {port}: {exc.strerror}") from None
    what = "AMQP over TLS (amqps)" if tls is not None else "AMQP"
    for host, listening in addresses(server):
        log.info("kanin listening for %s on %s port %d", what, host, listening)
    return server


@dataclass(frozen=True)
class HttpListener:
    """One of the HTTP listeners: what it serves, as logs and errors name it, and its
    protocol in the management API's listener list (RabbitMQ's names, "https..." for TLS)."""

    named: str
    protocol: str
    build: Callable[[MgmtContext], web.Application]


async def start_http(
    context: MgmtContext,
    listener: HttpListener,
    bind: str | None,
    port: int,
    tls: ssl.SSLContext | None,
) -> tuple[MgmtServer, list[Address]]:
    """Serve the listener's app on `port`, over HTTPS with `tls`."""
    server = MgmtServer(context, listener.build)
    try:
        listening = await server.start(bind, port, tls)
    except OSError as exc:  # named, as the AMQP port's is by the address in its text
        raise OSError(exc.errno, f"{listener.named} port {port}: {exc.strerror}") from None
    protocol = listener.protocol.replace("http", "https", 1) if tls else listener.protocol
    for host, bound in listening:
        context.listeners.append((protocol, host, bound))
        over = " over HTTPS" if tls is not None else ""
        log.info("kanin listening for the %s%s on %s port %d", listener.named, over, host, bound)
    return server, listening


def addresses(server: Listener) -> list[Address]:
    return [_address(sock) for sock in server.sockets]


def _address(sock: SocketLike) -> Address:
    name = sock.getsockname()
    return str(name[0]), int(name[1])
