"""What the core needs from a connection: a way out for frames, and who is talking."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kanin.amqp.assembler import AssemblyLimit
    from kanin.core.auth import User
    from kanin.core.broker import Broker
    from kanin.core.channel import Channel
    from kanin.core.queues import Queue
    from kanin.core.vhost import VirtualHost


class ConnectionPort(Protocol):
    broker: Broker
    user: User
    vhost: VirtualHost
    frame_max: int
    client_capabilities: dict[str, Any]
    exclusive_queues: set[Queue]  # the connection deletes them when it closes
    name: str  # "client address:port -> our address:port", for log lines
    assembly_limit: AssemblyLimit  # shared by its channels' content assemblers

    @property
    def writable(self) -> bool:
        """False while the socket's send buffer is above its high-water mark."""

    def send(self, data: bytes) -> None:
        """Queue bytes for the socket; they are written once per event-loop turn."""

    def send_parts(self, parts: list[bytes]) -> None: ...

    def hold_until_saved(self) -> None:
        """Hold what is sent from now on until the durable definitions as they are now are
        on disk (nothing if they already are); if they cannot be saved, close the
        connection with 541 instead."""

    def hold_input(self) -> Callable[[], None]:
        """Act on no further frame from the peer until the returned function is called
        (once, after the reply to the request being handled is sent): a reply that comes
        on a later loop turn still precedes those to what the peer sent after."""

    def request_flush(self, channel: Channel) -> None:
        """Ask for channel.flush() at the end of this event-loop turn (confirm coalescing)."""
