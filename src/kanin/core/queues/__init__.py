"""Queue types: one interface, one module per type, one factory choosing between them.

How this works:
- `base.Queue` is everything the rest of the broker may call on a queue: channels,
  handlers, routing, dead-lettering and persistence name only it. It holds what every
  type shares (name, flags, arguments, consumers, bindings); each method is abstract.
- `classic.ClassicQueue`: ready messages in order (core/ready.py), length limits, paging
  to the store (core/paging.py), consumer choice (core/dispatch.py), the timers of
  `expiry.py` and returned messages counted and held back (`returns.py`).
- `quorum.QuorumQueue`: RabbitMQ's quorum queue on one node, on the classic machinery:
  every message stored, deliveries counted, returns placed as RabbitMQ places them.
- `end_to_end.EndToEndQueue`: a classic queue declared with x-confirm-on-ack, whose
  publishers are confirmed when a consumer acks.
- `stream.StreamQueue`: RabbitMQ's stream, an append-only log that consumers read from
  offsets of their choosing; its log comes from the store's `StreamLogs`.
- `create` picks the type from the declared x-queue-type (already validated by
  core/queue_args.py). A new type is a module here subclassing `base.Queue`, and
  one entry in TYPES.
- A type reads time only from the scheduler it is given, never the system clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError
from kanin.core.queue_args import check_durable_flags
from kanin.core.queues.base import ACCEPTED, REFUSED, STORED, Queue
from kanin.core.queues.classic import ClassicQueue
from kanin.core.queues.end_to_end import EndToEndQueue
from kanin.core.queues.quorum import QuorumQueue
from kanin.core.queues.stream import StreamQueue

if TYPE_CHECKING:
    from kanin.core.memory import MemoryMonitor
    from kanin.core.queue_args import QueueArgs
    from kanin.core.scheduling import Scheduler
    from kanin.store.api import MessageStore, StreamLogs

__all__ = [
    "ACCEPTED",
    "REFUSED",
    "STORED",
    "TYPES",
    "ClassicQueue",
    "EndToEndQueue",
    "Queue",
    "QuorumQueue",
    "StreamQueue",
    "create",
]

# x-queue-type -> the class, for those made alike (a stream is made apart: its log).
TYPES: dict[str, Callable[..., Queue]] = {"classic": ClassicQueue, "quorum": QuorumQueue}


def create(
    name: str,
    vhost: str,
    scheduler: Scheduler,
    memory: MemoryMonitor,
    *,
    durable: bool,
    exclusive_owner: object | None,
    auto_delete: bool,
    arguments: dict[str, Any],
    args: QueueArgs,
    store: MessageStore | None,
    memory_budget_bytes: int,
    streams: StreamLogs | None = None,
) -> Queue:
    """A new queue of the type its arguments ask for (classic when they do not say)."""
    kind = arguments.get("x-queue-type") or "classic"
    if isinstance(kind, bytes):
        kind = kind.decode()
    if kind in ("quorum", "stream"):
        check_durable_flags(
            name,
            vhost,
            durable=durable,
            exclusive=exclusive_owner is not None,
            auto_delete=auto_delete,
        )
    if kind == "stream":
        if streams is None:
            raise ChannelError(C.NOT_IMPLEMENTED, "streams need a data directory")
        log = streams.open(vhost, name, args.stream.segment_bytes)
        return StreamQueue(
            name, vhost, scheduler, log=log, logs=streams, arguments=arguments, args=args
        )
    cls = EndToEndQueue if kind == "classic" and args.confirm_on_ack else TYPES[kind]
    return cls(
        name,
        vhost,
        scheduler,
        memory,
        durable=durable,
        exclusive_owner=exclusive_owner,
        auto_delete=auto_delete,
        arguments=arguments,
        args=args,
        store=store,
        memory_budget_bytes=memory_budget_bytes,
    )
