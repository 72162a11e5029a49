"""A consumer: a subscription of one channel to one queue."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kanin.amqp.methods import DeliveryEncoder
    from kanin.core.channel import Channel
    from kanin.core.queues import Queue


class Consumer:
    __slots__ = (
        "ack_timeout_s",
        "arguments",
        "channel",
        "encoder",
        "exclusive",
        "no_ack",
        "parked",
        "prefetch",
        "priority",
        "queue",
        "tag",
        "tag_bytes",
        "unacked",
    )

    def __init__(
        self,
        tag: str,
        channel: Channel,
        queue: Queue,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any],
    ) -> None:
        self.tag = tag
        self.tag_bytes = tag.encode()
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch  # 0 = unlimited; per-consumer limit (basic.qos global=false)
        self.arguments = arguments
        priority = arguments.get("x-priority", 0)
        self.priority = priority if isinstance(priority, int) else 0
        self.unacked = 0
        # What its channel allows a delivery to wait for its ack (core/ack_timeout.py).
        timeout_ms = channel.ack_timeout_ms(queue)
        self.ack_timeout_s = timeout_ms / 1000 if timeout_ms else 0.0
        # Off its queue's turns (core/dispatch.py) since it was found without capacity; the
        # channel gives them back when it has some again (Channel.wake, Channel._release).
        self.parked = False
        self.encoder: DeliveryEncoder | None = None  # its basic.deliver frames: Channel.deliver

    def has_capacity(self) -> bool:
        # has_room written out: a queue asks this for every message it hands out
        return self.channel.can_deliver() and (
            self.no_ack or self.prefetch == 0 or self.unacked < self.prefetch
        )

    def has_room(self) -> bool:
        """Room within its own prefetch limit; the channel may still be unable to deliver."""
        return self.no_ack or self.prefetch == 0 or self.unacked < self.prefetch
