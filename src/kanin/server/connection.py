"""One AMQP connection's asyncio edge: the socket under a session (kanin.core.session).

Rules of this file:
- Everything AMQP (states, handshake, channels, close rules, flow, heartbeats) is the
  session's; this Protocol only hands it what asyncio reports (bytes read, the
  transport pausing and resuming our writes, the socket going away).
- The session writes, pauses and resumes reading, closes and aborts through the
  asyncio transport itself, which has exactly the methods SessionTransport asks for
  (kanin.core.session.transport).
- The transport's write buffer limits are the session's: it stops reading from a peer
  that does not read what we write once WRITE_BUFFER_HIGH is waiting.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from kanin.core.session.session import WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW, Session
from kanin.server.tls import tls_peer

if TYPE_CHECKING:
    from kanin.core.broker import Broker


class AMQPConnection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.session: Session | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        stream = cast(asyncio.Transport, transport)
        stream.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        peer = stream.get_extra_info("peername") or ("?", 0)
        local = stream.get_extra_info("sockname") or ("?", 0)
        self.session = Session(self.broker, self.broker.loop_scheduler, stream, peer, local)
        # Over TLS, asyncio calls this once the TLS handshake is done: the certificate is known.
        self.session.opening.tls = tls_peer(stream)

    def data_received(self, data: bytes) -> None:
        assert self.session is not None  # asyncio calls connection_made first
        self.session.data_received(data)

    def pause_writing(self) -> None:
        if self.session is not None:
            self.session.pause_writing()

    def resume_writing(self) -> None:
        if self.session is not None:
            self.session.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.session is not None:
            self.session.connection_lost(exc)
