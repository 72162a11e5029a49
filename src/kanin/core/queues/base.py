"""What the rest of the broker may ask of a queue, whatever its type.

Channels, handlers, routing (vhost, exchanges), dead-lettering and persistence hold a
`Queue` and call only what is declared here; how a type orders, stores, pages, expires
and dispatches its messages is its own business. Each method says who calls it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final

from kanin.core.queue_args import KNOWN_ARGUMENTS, RETURNED, QueueArgs

if TYPE_CHECKING:
    from kanin.core.confirms import ConfirmTicket
    from kanin.core.consumer import Consumer
    from kanin.core.exchanges import Binding
    from kanin.core.message import Entry, Message
    from kanin.core.policies import Policy
    from kanin.store.api import Recovered

# What Queue.publish did with a message (Final: compiled, a constant, not a lookup).
REFUSED: Final = 0
ACCEPTED: Final = 1
STORED: Final = 2


class Queue:
    """A queue's identity is common to every type; its behaviour is each type's own.

    Not an ABC (the abstractmethods are for the type check): compiled with mypyc, the
    queue classes had no ABC state of their own and shared abc.ABC's isinstance cache, so
    after isinstance(a quorum queue, StreamQueue) said False, isinstance(it, ClassicQueue)
    said False too, and the other way round a quorum queue passed for a stream."""

    type_name: ClassVar[str] = ""  # x-queue-type
    # basic.consume on a channel with a global prefetch limit (quorum queues refuse it).
    supports_global_qos: ClassVar[bool] = True
    # The arguments a redeclare must repeat (RabbitMQ compares only a stream's own).
    compared_arguments: ClassVar[tuple[str, ...]] = KNOWN_ARGUMENTS
    # queue.delete's if-unused and if-empty apply (RabbitMQ's streams ignore both).
    delete_has_conditions: ClassVar[bool] = True

    def __init__(
        self,
        name: str,
        vhost: str,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        args: QueueArgs | None = None,
    ) -> None:
        self.name = name
        self.vhost = vhost
        # A confirmed publish routed here is confirmed by the queue itself, through the
        # ticket `publish_with_ticket` gets: an end-to-end queue when a consumer acks, a
        # stream once its own log has the message on disk. (Attributes, not class
        # variables: read per publish, and compiled an instance's field is a load.)
        self.settles_confirms = False
        # Such a queue that never settles during `publish_with_ticket` itself, only on a
        # later loop turn (a stream, after its commit round): a publish routed to it alone
        # waits for it alone, not for its routing too (publishing._hold_for_queues).
        self.settles_later = False
        # The confirm party that is this queue alone, made once (ConfirmLedger.hold).
        self.as_party: frozenset[object] = frozenset((self,))
        self.durable = durable
        self.exclusive_owner = exclusive_owner  # the owning connection, or None
        self.auto_delete = auto_delete
        self.arguments = arguments or {}
        self.args = args or QueueArgs()
        # The policy that applies (core/policy_args.py); `args` already has its effect.
        self.policy: Policy | None = None
        # Every consumer, in registration order (single active consumer takes the first).
        self.consumers: OrderedDict[Consumer, None] = OrderedDict()
        self.bindings: dict[tuple[Any, ...], Binding] = {}  # kept by the vhost
        self.deleted = False  # set by `delete`
        # Set by the vhost: auto-delete and x-expires, and where dead letters go.
        self.on_unused: Callable[[Queue], None] | None = None
        self.on_dead_letter: Callable[[Queue, list[Entry], str], None] | None = None
        # Running totals for the management API's message rates, bumped by the code that
        # routes, delivers and settles (an attribute increment each; mgmt/rates.py reads
        # them every few seconds).
        self.msg_published = 0  # routed here by a publish (a channel's or the API's)
        self.msg_delivered = 0  # basic.deliver to a consumer that acks
        self.msg_delivered_no_ack = 0  # basic.deliver to a consumer that does not
        self.msg_got = 0  # basic.get-ok awaiting an ack
        self.msg_got_no_ack = 0  # basic.get-ok with no-ack
        self.msg_acked = 0  # deliveries from here acknowledged
        self.msg_redelivered = 0  # deliveries and get-oks flagged redelivered

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.vhost!r}, {self.name!r})"

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    def apply_policy(self, policy: Policy | None, args: QueueArgs) -> None:
        """Vhost, when the queue's policy changes: `args` are its arguments merged with the
        policy's definition (core/policy_args.py), to act on from now on."""
        self.policy = policy
        self.apply_args(args)

    def apply_args(self, args: QueueArgs) -> None:
        """New limits, dead-lettering or timeouts: a type that built state from the old
        ones (timers, a memory budget) changes it here too."""
        self.args = args

    @property
    @abstractmethod
    def message_count(self) -> int:
        """Ready messages: declare-ok, get-ok, purge and delete (vhost, handlers)."""

    @abstractmethod
    def publish(self, message: Message) -> int:
        """Routing and dead-lettering: enqueue; REFUSED, ACCEPTED or STORED (confirm waits)."""

    def publish_with_ticket(self, message: Message, ticket: ConfirmTicket) -> int:
        """Publishing in confirm mode to a queue that `settles_confirms`: enqueue; the
        queue settles the publish's confirm through `ticket` (ledger.vouch with itself as
        the party, or ledger.refuse) when its own rule says. REFUSED (confirmed by the
        caller, as for `publish`) or ACCEPTED."""
        raise NotImplementedError(f"{self!r} does not settle confirms")

    @abstractmethod
    def reject_publish_dead_letter(self, message: Message) -> None:
        """Publishing, after REFUSED: x-overflow reject-publish-dlx dead-letters it."""

    @abstractmethod
    def restore(self, messages: list[Recovered], all_redelivered: bool = False) -> None:
        """Persistence at start-up: recovered messages back in order, not written again."""

    @abstractmethod
    def get(self, answer: Callable[[Entry | None], None]) -> bool:
        """basic.get: answer(the next live message, removed and in memory, or None if the
        queue is empty). True if answered now; False if the answer comes on a later loop
        turn (the head is being read back from the store): gets are answered in order."""

    @abstractmethod
    def requeue(self, entries: list[Entry], how: str = RETURNED) -> None:
        """Channel (reject, nack, recover, close) and basic.get: delivered messages back,
        redelivered; `how` is queue_args' REJECTED, NACKED, RETURNED or UNSENT."""

    @abstractmethod
    def forget(self, entry: Entry) -> None:
        """Channel and basic.get: the message left for good (acked, or sent without ack)."""

    @abstractmethod
    def note_delivered(self, entry: Entry) -> None:
        """Channel and basic.get: sent with an ack pending (redelivered after a crash)."""

    @abstractmethod
    def dead_letter(self, entries: list[Entry], reason: str) -> None:
        """Channel (reject/nack without requeue): the messages leave, via the DLX if any."""

    def check_purgeable(self) -> None:
        """queue.purge, before `purge`: raise if the type refuses it (a stream does)."""
        return None  # every type but the stream purges

    def admit_consumer(self, consumer: Consumer) -> None:
        """basic.consume, first thing: raise if the type refuses this consumer, or change
        what the type ignores of it."""
        return None  # the stream has rules of its own

    @abstractmethod
    def purge(self) -> int:
        """queue.purge and the vhost deleting the queue: drop every ready message."""

    @abstractmethod
    def touch(self) -> None:
        """Vhost (redeclare), basic.get, basic.consume: the queue was used (x-expires)."""

    @abstractmethod
    def add_consumer(self, consumer: Consumer) -> None:
        """Channel on basic.consume: a consumer joins and dispatch starts."""

    @abstractmethod
    def remove_consumer(self, consumer: Consumer) -> None:
        """Channel on cancel or close: a consumer leaves (may auto-delete the queue)."""

    @abstractmethod
    def has_exclusive_consumer(self) -> bool:
        """basic.consume: is another consumer holding the queue exclusively?"""

    @abstractmethod
    def unpark(self, consumer: Consumer) -> None:
        """Channel, when a consumer it parked has room again: give it its turns back."""

    @abstractmethod
    def schedule_dispatch(self) -> None:
        """Channel, after acks free capacity: hand out messages on the next turn."""

    @abstractmethod
    def dispatch_now(self) -> None:
        """Channel, requeueing one consumer's deliveries at a time: hand them out now."""

    @abstractmethod
    def delete(self) -> None:
        """Vhost, first thing when deleting the queue: no timer fires nor dispatch runs."""

    @abstractmethod
    def drop_consumers(self) -> None:
        """Vhost, last thing when deleting the queue: forget consumers (channels were told)."""
