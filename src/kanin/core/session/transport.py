"""How a session and the byte stream under it talk (the only way out of the core).

Rules of this file:
- Into the session, the edge that owns the socket calls data_received, pause_writing,
  resume_writing and connection_lost; out of it, the session calls the methods below.
- The session calls them directly rather than returning actions from data_received,
  because most of what it writes is not an answer to what it read: deliveries,
  confirms and heartbeats come from queue dispatches and timers. A direct call keeps
  the per-delivery path as short as it was inside the asyncio Protocol.
- asyncio.Transport has exactly these methods, so the asyncio edge hands its transport
  over as it is; tests hand over a recorder (kanin.testing.session_pair).
"""

from __future__ import annotations

from typing import Any, Protocol


class SessionTransport(Protocol):
    """What a session asks of the byte stream under it."""

    def write(self, data: bytes) -> None:
        """Send bytes; the session has already coalesced them per event-loop turn."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None:
        """Close once what was written has gone out."""

    def abort(self) -> None:
        """Close now; what was not written yet is lost."""


def address_text(address: tuple[Any, ...]) -> str:
    """A socket address as a connection's name shows it: host:port, [host]:port for IPv6."""
    host = str(address[0])
    return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
