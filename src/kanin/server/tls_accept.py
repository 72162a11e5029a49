"""The amqps listener: kanin accepts the TCP connections and runs each TLS handshake
itself, so that a refused or failed one is logged with the peer and the reason, as
RabbitMQ logs them (https://www.rabbitmq.com/troubleshooting-ssl.html). asyncio's own
TLS server (create_server with ssl=...) drops those without a word.

How this works: TlsListener binds its listening sockets as create_server would (every
address the bind address resolves to, IPv6 sockets IPv6-only) and runs one accept loop
per socket. Each accepted socket gets its handshake from loop.connect_accepted_socket
(the same TLS machinery as create_server's, asyncio's or uvloop's, with the handshake
timeout); once it succeeds the AMQP protocol has the connection as with create_server.
If it fails, the socket is closed and one warning names the peer and OpenSSL's reason.
A flood of failing handshakes (a scanner on the port) logs at most FAILURES_LOGGED per
FAILURE_WINDOW_S, then one line with how many more failed.
(Upgrading a plain connection with start_tls would race: uvloop starts reading a new
connection after connection_made whatever the protocol asked, and the client's hello
would reach the plain protocol.)
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from kanin.core.session.transport import address_text

log = logging.getLogger("kanin.server.tls")

FAILURES_LOGGED = 20
FAILURE_WINDOW_S = 10.0


class FailureLog:
    """Logs failed handshakes, at most FAILURES_LOGGED per window (see the top)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._window_start = -FAILURE_WINDOW_S
        self._logged = 0
        self._suppressed = 0

    def failed(self, peer: str, reason: str) -> None:
        now = self._clock()
        if now - self._window_start >= FAILURE_WINDOW_S:
            if self._suppressed:
                log.warning(
                    "%d more TLS handshakes failed in the last %.0f s (not logged one by one)",
                    self._suppressed,
                    FAILURE_WINDOW_S,
                )
            self._window_start, self._logged, self._suppressed = now, 0, 0
        if self._logged < FAILURES_LOGGED:
            self._logged += 1
            log.warning("TLS handshake with %s failed: %s", peer, reason)
        else:
            self._suppressed += 1


# What the commonest OpenSSL reasons mean on a broker's amqps port.
_HINTS = {
    "WRONG_VERSION_NUMBER": "not TLS: a plain AMQP client on the amqps port?",
    "HTTP_REQUEST": "plain HTTP on the amqps port",
    "UNSUPPORTED_PROTOCOL": "the client offers no TLS version the broker accepts: 1.2 or 1.3",
    "NO_SHARED_CIPHER": "the client offers no cipher the broker accepts",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "a client certificate is required",
    "TLSV1_ALERT_UNKNOWN_CA": "the client does not trust the broker's certificate",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the client refused the broker's certificate",
}


def failure_reason(exc: BaseException) -> str:
    """OpenSSL's reason for an SSLError (and why a certificate did not verify), else what
    happened: what an operator needs to tell a wrong CA from a plain-AMQP client."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"client certificate refused: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        said = exc.reason.lower().replace("_", " ")
        hint = _HINTS.get(exc.reason)
        return f"{said} ({hint})" if hint else said
    if isinstance(exc, (ConnectionAbortedError, TimeoutError)):
        return "no handshake in time"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, EOFError)):
        return "the client hung up"
    return str(exc) or type(exc).__name__


def listening_sockets(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for every address `host` resolves to (all
    interfaces, IPv4 and IPv6, for None), as create_server binds them. Raises OSError
    (socket.gaierror for a name that does not resolve) and closes what it opened."""
    infos = socket.getaddrinfo(
        host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    opened: list[socket.socket] = []
    try:
        for family, _type, _proto, _name, address in dict.fromkeys(infos):
            sock = socket.create_server(address[:2], family=family, backlog=backlog)
            sock.setblocking(False)
            opened.append(sock)
    except BaseException:
        for sock in opened:
            sock.close()
        raise
    return opened


class TlsListener:
    """The amqps listening sockets and their accept loops (see the top); closes as an
    asyncio.Server does (close, then wait_closed)."""

    def __init__(
        self,
        sockets: list[socket.socket],
        protocol_factory: Callable[[], asyncio.Protocol],
        context: ssl.SSLContext,
        timeout_s: float,
    ) -> None:
        self.sockets = sockets
        self._protocol_factory = protocol_factory
        self._context = context
        self._timeout_s = timeout_s
        self._failures = FailureLog()
        self._loop = asyncio.get_running_loop()
        self._handshakes: set[asyncio.Task[None]] = set()
        self._accepting = [self._loop.create_task(self._accept(sock)) for sock in sockets]

    async def _accept(self, listening: socket.socket) -> None:
        failing = False
        while True:
            try:
                connection, peer = await self._loop.sock_accept(listening)
            except OSError as exc:  # out of file descriptors and the like: wait, go on
                if not failing:  # once, not ten times a second
                    log.warning("amqps: cannot accept connections: %s", exc)
                failing = True
                await asyncio.sleep(0.1)
                continue
            failing = False
            task = self._loop.create_task(self._handshake(connection, peer))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, connection: socket.socket, peer: tuple[Any, ...]) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self._protocol_factory,
                connection,
                ssl=self._context,
                ssl_handshake_timeout=self._timeout_s,
            )
        except (TimeoutError, OSError, EOFError) as exc:
            self._failures.failed(address_text(peer), failure_reason(exc))
            connection.close()

    def close(self) -> None:
        """No new connections: what is accepted stays (the broker closes its sessions)."""
        for task in (*self._accepting, *self._handshakes):
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._accepting, *self._handshakes, return_exceptions=True)
