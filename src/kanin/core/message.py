"""A published message and its place in one queue, and what holding it costs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kanin.amqp.frames import decode_properties

if TYPE_CHECKING:
    from kanin.core.confirms import ConfirmTicket

# What the memory alarm counts for a message besides its body and encoded header, measured
# with `kanin server` on CPython 3.12 (RSS growth per message, 200,000 to 400,000 empty
# messages published to one queue, rounded up so the count errs on the safe side):
# - held in memory: the Message and Entry objects, the header's bytes object, the
#   exchange and routing-key strings, the queue's deque slot (312 bytes measured);
MESSAGE_OVERHEAD_BYTES = 320
# - persisted too: the store's index of the message (a further 143 bytes measured);
STORED_OVERHEAD_BYTES = 160
# - paged out (body and header only on disk): the Entry, its slot and the store's index,
#   what a deep queue keeps in memory per message (416 bytes measured).
PAGED_OUT_BYTES = 420


class Message:
    """One published message, shared by every queue it was routed to.

    `header_payload` is the content header exactly as the publisher sent it, so a
    delivery forwards the same bytes; `properties` is its decoded form, decoded on
    first use when not given: a message read back from the store for delivery only
    forwards the bytes and never pays for decoding them.
    """

    __slots__ = (
        "_properties",
        "body",
        "cc_bcc",
        "exchange",
        "expiration_ms",
        "header_payload",
        "routing_key",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        header_payload: bytes,
        body: bytes,
        properties: Any,
        expiration_ms: int | None = None,
        cc_bcc: tuple[str, ...] | None = (),
    ) -> None:
        # Sender-selected routing keys (CC, BCC); they route the message too. None for a
        # message read back from the store: its CC keys are in its headers, BCC is gone.
        self.cc_bcc = cc_bcc
        self.exchange = exchange
        self.expiration_ms = expiration_ms  # the per-message `expiration`, parsed
        self.routing_key = routing_key
        self.header_payload = header_payload
        self.body = body
        self._properties = properties

    @property
    def properties(self) -> Any:
        if self._properties is None:
            self._properties = decode_properties(self.header_payload)
        return self._properties

    def shed_properties(self) -> None:
        """Drop the decoded properties once routing is done: decoded header tables take
        several times their encoded size, and a queued message only forwards the bytes.
        The rare later use (dead-lettering, requeue into a priority queue) decodes again."""
        self._properties = None

    @property
    def routing_keys(self) -> tuple[str, ...]:
        return (self.routing_key, *(self.cc_bcc or ()))

    @property
    def persistent(self) -> bool:
        return bool(self.properties.delivery_mode == 2)

    @property
    def headers(self) -> dict[str, Any]:
        return self.properties.headers or {}

    @property
    def priority(self) -> int:
        """The priority property as queues use it: 0 when absent or nonsense, at most 255."""
        priority = self.properties.priority
        return min(priority, 255) if isinstance(priority, int) and priority > 0 else 0


class Entry:
    """A message in one queue. `seq` orders the queue; a requeue goes back to its place.

    A paged-out entry has `message` None: the store holds it (`stored_id`) and the queue
    reads it back before it goes out. What ordering, expiry and counting need stays here.
    """

    __slots__ = (
        "cost",
        "expires_at",
        "message",
        "redelivered",
        "returns",
        "seq",
        "size",
        "stored_id",
        "ticket",
    )

    def __init__(self, message: Message | None, seq: int, size: int = -1) -> None:
        self.message = message
        self.seq = seq
        self.size = len(message.body) if message is not None else size  # body bytes
        assert self.size >= 0, "a paged-out entry needs its size"
        # What the memory monitor counts for this entry while a queue holds it (see
        # entry_cost); 0 when it is not counted (not in a queue yet, or gone).
        self.cost = 0
        self.redelivered = False
        # Times it came back to this queue (only queues that count deliveries count them):
        # its next delivery carries it as x-delivery-count.
        self.returns = 0
        self.stored_id = 0  # id in the message store, 0 when not persisted
        self.expires_at: float | None = None  # scheduler time after which it is dead
        # The publisher's confirm its ack settles, in an end-to-end queue (end_to_end.py).
        self.ticket: ConfirmTicket | None = None

    def __lt__(self, other: Entry) -> bool:
        return self.seq < other.seq

    def __hash__(self) -> int:
        # By identity, as object's. Stated because a mypyc-compiled class that defines
        # __lt__ without __hash__ is unhashable (https://github.com/mypyc/mypyc/issues/1173).
        return id(self) >> 4  # object addresses are 16-byte aligned


def message_cost(message: Message) -> int:
    """What holding `message` in memory costs: body, encoded header (properties, header
    table) and a fixed overhead. Two len() calls: no object graph is walked."""
    return len(message.body) + len(message.header_payload) + MESSAGE_OVERHEAD_BYTES


def entry_cost(entry: Entry) -> int:
    """What a queue's entry costs as it is now: its message in memory, or paged out."""
    message = entry.message
    if message is None:
        return PAGED_OUT_BYTES
    # message_cost written out: a queue counts every message it takes.
    cost = len(message.body) + len(message.header_payload) + MESSAGE_OVERHEAD_BYTES
    return cost + STORED_OVERHEAD_BYTES if entry.stored_id else cost
