"""What a channel gets from outside it: its connection, and the broker's shared services.

A channel is handed both when it is made (Channel.__init__), so nothing in the core
reaches through the connection to the broker: a test builds a channel from a fake
connection and the services it wants, and the connection need not know the broker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kanin.amqp.assembler import AssemblyLimit
    from kanin.core.auth import User
    from kanin.core.channel import Channel
    from kanin.core.queues import Queue
    from kanin.core.reply_to import ReplyRegistry
    from kanin.core.vhost import VirtualHost
    from kanin.store.api import MessageStore


class ConnectionPort(Protocol):
    """What a channel needs from its connection: a way out for frames, and its limits."""

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

    def request_flush_next_turn(self, channel: Channel) -> None:
        """Ask for channel.flush() once the connections readable now have been read: for
        confirms that other connections resolve (consumers' acks, commit rounds), so that
        all of them that a turn's reads resolve go out in one frame."""


@dataclass(frozen=True)
class ChannelServices:
    """What a channel uses beyond its connection: fixed once the connection has opened
    its vhost, so the session builds it once and hands it to each channel it opens."""

    vhost: VirtualHost
    user: User  # whom permission checks and the user_id property are about
    store: MessageStore | None  # None when messages are not kept on disk
    replies: ReplyRegistry  # direct reply-to consumers, shared across connections
    max_message_bytes: int  # the largest body a publish may carry
    # A delivery not acked within this closes its channel (None: no limit) unless its
    # queue says otherwise (x-consumer-timeout); see core/ack_timeout.py.
    consumer_timeout_ms: int | None = None
