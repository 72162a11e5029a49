"""The classic queue: ready messages in order, consumers, and the message lifecycle.

How this works:
- Every message entering the queue gets the next sequence number; `ready` (core/ready.py)
  hands them out in order, by priority first for x-max-priority queues, and a requeued
  message regains its original place.
- Dispatch never runs inline with a publish: the queue asks the scheduler for one
  dispatch per event-loop turn and then hands out as many messages as consumers
  have room for, DISPATCH_BATCH at a time: the rest of a deep queue waits for the next
  loop turn (call_next_turn), so draining to a fast consumer holds no one else up. Which
  consumer gets each (priorities, turns, parking, single active consumer) is
  queues/consumers.py's choice, in O(1) amortised.
- Message TTL (x-message-ttl, per-message expiration, a `wait_limit`) is enforced at the
  head, as in RabbitMQ: one timer (expiry.HeadTimer) is armed for the head's expiry, it
  drops (or dead-letters) the expired messages at the head and re-arms for the next:
  work in proportion to what expires, never a scan of the queue. A message that
  expired behind a longer-lived one is caught when it reaches the head.
- x-expires (expiry.IdleTimer) deletes the queue unused (no consumer, get or redeclare)
  for the period; x-max-length(-bytes) with x-overflow bounds it.
- Messages leaving for good go through `forget` (memory accounting) and, when the queue
  has a dead-letter exchange, through `on_dead_letter`. The memory monitor counts each
  entry the queue holds, ready or unacked, at `entry_cost` (in memory: body, encoded
  header and a fixed overhead; paged out: its index), from `_count` to `forget`/`purge`.
- Deep queues: past the queue's memory budget, persistent messages of a durable queue
  are paged out and read back in batches from the head, off the loop (core/paging.py says
  how): while the head's read is in flight, consumers and basic.get (`get`, answered
  later, in order) wait for it; entries that leave meanwhile are not brought back.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from kanin.core.commit_rounds import RoundBatches
from kanin.core.message import Entry, Message, entry_cost
from kanin.core.paging import DEFAULT_MEMORY_BUDGET_BYTES, DeadLetters, Pager
from kanin.core.queue_args import RETURNED, QueueArgs
from kanin.core.queues.base import ACCEPTED, REFUSED, STORED, Queue
from kanin.core.queues.consumers import ConsumerChoice
from kanin.core.queues.dedup_index import DedupIndex
from kanin.core.queues.expiry import HeadExpiry, IdleTimer, WaitLimit, deadline_of, ttl_ms
from kanin.core.queues.returns import READY, SPENT, Returns
from kanin.core.ready import FifoReady, PriorityReady, Ready
from kanin.store.records import queue_key

if TYPE_CHECKING:
    from kanin.core.confirms import ConfirmTicket
    from kanin.core.consumer import Consumer
    from kanin.core.memory import MemoryMonitor
    from kanin.core.scheduling import Scheduler
    from kanin.store.api import MessageStore, Recovered

log = logging.getLogger(__name__)

# Deliveries per queue per event-loop turn before yielding to other work.
DISPATCH_BATCH = 512


class ClassicQueue(Queue):
    type_name: ClassVar[str] = "classic"

    def __init__(
        self,
        name: str,
        vhost: str,
        scheduler: Scheduler,
        memory: MemoryMonitor,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        args: QueueArgs | None = None,
        store: MessageStore | None = None,
        memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    ) -> None:
        super().__init__(name, vhost, durable=durable, exclusive_owner=exclusive_owner)
        self.auto_delete, self.arguments = auto_delete, arguments or {}
        self.args = args or QueueArgs()
        self.ready: Ready = (
            PriorityReady(self.args.max_priority)
            if self.args.max_priority is not None
            else FifoReady()
        )
        self.choice = ConsumerChoice(self.consumers, self.args.single_active_consumer)
        self.ready_bytes = 0  # body bytes of every ready message (x-max-length-bytes)
        self._scheduler = scheduler
        self._memory = memory
        self.store = store if durable else None  # for a durable queue's persistent messages
        self.store_key = queue_key(vhost, name)
        self._budget_bytes = memory_budget_bytes  # the broker's, kept for a policy's queue-mode
        budget, label = 0 if self.args.lazy else memory_budget_bytes, repr(self)
        self.pager = Pager(self.store, self.store_key, budget, label, self._count, self._landed)
        self._dead_letters = DeadLetters(self, self.store, self.store_key)
        self.returns = Returns(self.args.returns, scheduler, self.store, self.store_key)
        self.returns.dead_letter, self.returns.ready_again = self.dead_letter, self._ready_again
        self._stores_all = False  # quorum queues store every message, persistent or not
        self._dedup = DedupIndex() if self.args.deduplicates else None
        self._getters: deque[Callable[[Entry | None], None]] = deque()  # gets waiting for a read
        self._next_seq = 1
        # Stored messages whose commit round has not ended (see _on_commit).
        self._unsynced: RoundBatches[Entry] | None = (
            RoundBatches(self.store, self._on_commit) if self.store is not None else None
        )
        self._dispatch_scheduled = self._had_consumer = False
        self.wait_limit: WaitLimit | None = None  # x-confirm-timeout (queues/end_to_end.py)
        self._ttl = HeadExpiry(
            scheduler, lambda: self.ready.peek(), self._pop, self._expired, lambda: self.deleted
        )
        in_use = lambda: bool(self.consumers)  # noqa: E731 (a queue consumed from is in use)
        self._idle = IdleTimer(scheduler, self.args.expires_ms, in_use, self._on_idle)
        self.touch()

    def apply_args(self, args: QueueArgs) -> None:
        """A policy changed the queue's limits: they act now (core/policy_args.py says how,
        as on RabbitMQ); messages already queued keep their TTL."""
        old, self.args = self.args, args
        self.returns.policy = args.returns
        self.pager.budget_bytes = 0 if args.lazy else self._budget_bytes
        if args.expires_ms != old.expires_ms and not self.deleted:
            self._idle.set_period(args.expires_ms)
        if args.has_length_limit and not args.rejects_publish:
            self._enforce_length()

    @property
    def message_count(self) -> int:
        return len(self.ready) + len(self.returns)

    @property
    def memory_budget_bytes(self) -> int:
        return self.pager.budget_bytes

    @property
    def loaded_bytes(self) -> int:
        """Body bytes of ready messages held in memory."""
        return self.pager.loaded_bytes

    @property
    def paged_out(self) -> int:
        """Ready messages whose body is only in the store."""
        return self.pager.paged_out

    # -- messages in --------------------------------------------------------------------

    def publish(self, message: Message, ticket: ConfirmTicket | None = None) -> int:
        """Enqueue: REFUSED (x-overflow reject-publish*), ACCEPTED, or STORED when the
        message went to the store and its publisher's confirm must wait for the disk.
        The entry carries `ticket` (the confirm an end-to-end queue settles)."""
        size = len(message.body)
        if self.args.rejects_publish and self.args.full_for(
            len(self.ready), self.ready_bytes, size
        ):
            return REFUSED
        dedup = self._dedup
        key = dedup.key_of(message) if dedup is not None else None
        if key is not None and dedup is not None and dedup.holds(key):
            return STORED if self.store is not None else ACCEPTED  # see queues/dedup_index.py
        entry = Entry(message, self._next_seq)
        entry.ticket = ticket
        self._next_seq += 1
        if key is not None and dedup is not None:
            dedup.joined(entry, key)
        ttl = ttl_ms(self.args.message_ttl_ms, message.expiration_ms)
        if ttl is not None or self.wait_limit is not None:
            entry.expires_at = deadline_of(self._scheduler, ttl, self.wait_limit)
        result = ACCEPTED
        # As RabbitMQ: to an empty queue's consumer with room at once (not counted against
        # x-max-length, no TTL of 0); without acks it is gone then: nothing to store.
        consumer = self.choice.pick() if not self.ready and self.consumers else None
        stores = consumer is None or not consumer.no_ack
        if stores and self.store is not None and (self._stores_all or message.persistent):
            entry.stored_id = self.store.enqueue(
                self.store_key,
                message.exchange,
                message.routing_key,
                message.header_payload,
                message.body,
                priority=message.priority,
                expires_at_ms=0 if ttl is None else self._scheduler.wall_clock_ms() + ttl,
            )
            assert self._unsynced is not None
            self._unsynced.add(entry)
            result = STORED
        if consumer is not None:
            if not consumer.no_ack:  # an auto-ack delivery is forgotten as it goes out
                self._count(entry)
            consumer.channel.deliver(consumer, entry)
            return result
        if ttl == 0:
            self._count(entry)
            self.dead_letter([entry], "expired")
            return result
        self._append(entry, message.priority)
        if self.args.has_length_limit:
            self._enforce_length()
        if entry.expires_at is not None:
            self._ttl.arm()
        if self.consumers:
            self.schedule_dispatch()
        return result

    def _on_commit(self, batch: list[Entry], ok: bool) -> None:
        """A failed round nacks its publishers, who may well publish again: the messages
        it held must not stay to be delivered too. Those not yet delivered leave the
        queue (and the store, should a later round still write them). One already handed
        to a consumer cannot be called back; its publisher got a nack all the same."""
        if ok or self.deleted:
            return
        for entry in self.ready.remove({id(entry) for entry in batch}):
            self.ready_bytes -= entry.size
            self.pager.left(entry)
            self.forget(entry)
        log.warning("%r: dropped the undelivered messages of a failed disk write", self)

    def _append(self, entry: Entry, priority: int) -> None:
        """A new ready message, held in memory or paged out (Pager.admit says which)."""
        self.pager.admit(entry)
        self._count(entry)
        self.ready.append(entry, priority)
        self.ready_bytes += entry.size

    def restore(self, messages: list[Recovered], all_redelivered: bool = False) -> None:
        """Recovered messages, back in order and paged out, without writing them again:
        the first delivery reads the head back. Expiry is the one stored, on the wall clock."""
        now, wall_ms = self._scheduler.time(), self._scheduler.wall_clock_ms()
        counts, spent, ready = self.args.returns.counts, [], 0
        for recovered in messages:
            entry = Entry(None, self._next_seq, recovered.body_size)
            self._next_seq += 1
            entry.stored_id = recovered.id
            entry.redelivered = recovered.redelivered or all_redelivered
            if recovered.expires_at_ms:
                entry.expires_at = now + (recovered.expires_at_ms - wall_ms) / 1000
            self._count(entry)
            outcome = self.returns.restored(entry, recovered.returns) if counts else READY
            if outcome != READY:
                if outcome == SPENT:
                    spent.append(entry)
                continue
            self.ready.append(entry, recovered.priority)
            self.ready_bytes += recovered.body_size
            ready += 1
        self.pager.restored(ready)
        if self._dedup is not None and self.store is not None:
            self._dedup.restore(self.store, self.store_key, list(self.ready))
        self._ttl.arm()
        if spent:
            self.dead_letter(spent, "delivery_limit")

    def reject_publish_dead_letter(self, message: Message) -> None:
        """x-overflow reject-publish-dlx: the refused message is dead-lettered (maxlen)."""
        if self.args.overflow == "reject-publish-dlx" and self.on_dead_letter is not None:
            self.on_dead_letter(self, [Entry(message, 0)], "maxlen")

    def requeue(self, entries: list[Entry], how: str = RETURNED) -> None:
        """Put delivered messages back, marked redelivered: counted, and dead-lettered or
        held back first if the queue says so (Returns)."""
        if self.deleted:
            for entry in entries:
                self.forget(entry)
            return
        for entry in entries:
            entry.redelivered = True
        self._put_back(self.returns.take_back(entries, how))

    def _ready_again(self, entries: list[Entry]) -> None:
        """Held back after a return, and now due (Returns)."""
        if self.deleted:
            for entry in entries:
                self.forget(entry)
            return
        for entry in entries:
            if entry.message is None:  # its record could not be read (logged): dropped
                self.forget(entry)
            else:
                self._count(entry)  # read back after a restart: it costs what it holds now
        self._put_back([entry for entry in entries if entry.message is not None])

    def _put_back(self, entries: list[Entry]) -> None:
        if not entries:
            return
        for entry in entries:
            assert entry.message is not None, "only delivered messages come back"
            self._return_to_ready(entry)
            self.ready_bytes += entry.size
            self.pager.returned(entry)
        if self.args.has_length_limit and not self.args.rejects_publish:
            self._enforce_length()  # RabbitMQ drops from the head, requeued ones included
        self._ttl.arm()
        if self.consumers:
            self.schedule_dispatch()

    def _return_to_ready(self, entry: Entry) -> None:
        """Where a returned message goes: back to its original place, as RabbitMQ's classic
        queues do (quorum.py puts it elsewhere)."""
        self.ready.requeue(entry)  # delivered, so in memory: it stays there

    # -- length limits ------------------------------------------------------------------

    def _enforce_length(self) -> None:
        """x-overflow drop-head: drop (dead-letter, reason maxlen) from the head until the
        queue is within its limits; for a priority queue the head is the highest priority."""
        dropped = []
        while self.args.over_limit(len(self.ready), self.ready_bytes):
            entry = self._pop()
            assert entry is not None
            dropped.append(entry)
        if dropped:
            self.dead_letter(dropped, "maxlen")

    # -- messages out -------------------------------------------------------------------

    def take(self) -> Entry | None:
        """Remove and return the next live message if it is in memory; None if the queue is
        empty or its head is being read back (dispatch and `get` go on when it lands)."""
        return self._pop() if self._head_ready() else None

    def get(self, answer: Callable[[Entry | None], None]) -> bool:
        if not self._getters:  # else earlier gets wait for a read: this one goes after them
            entry = self.take()
            if entry is not None or not self.ready:
                answer(entry)
                return True
        self._getters.append(answer)
        return False

    def _head_ready(self) -> bool:
        """Whether the next message can go out now: in memory, once the expired ones and
        those the store lost are gone. A paged-out head is read back (Pager.read_head);
        when that lands, `_landed` goes on."""
        while True:
            head = self.ready.peek()
            if head is None:
                return False
            expires_at = head.expires_at
            if expires_at is not None and expires_at <= self._scheduler.time():
                self._ttl.expire_head()
                continue
            if head.message is not None:
                return True
            if head.stored_id:
                fifo = self.ready.head_fifo()
                assert fifo is not None
                self.pager.read_head(fifo)
                return False
            self._pop()  # its record could not be read (logged when the read landed)
            self.forget(head)

    def _pop(self) -> Entry | None:
        entry = self.ready.pop()
        if entry is not None:
            self.ready_bytes -= entry.size
            self.pager.left(entry)
        return entry

    def _landed(self) -> None:
        """A read back is in: the gets waiting are answered in order, then consumers served.
        A deleted queue answers its gets with nothing."""
        getters = self._getters
        while getters:
            entry = None if self.deleted else self.take()
            if entry is None and self.ready and not self.deleted:
                return  # the next head is being read: its landing comes back here
            getters.popleft()(entry)
        if self.consumers:
            self.schedule_dispatch()

    def _count(self, entry: Entry) -> None:
        """The entry is new to the queue, or its message was just read back: count what
        it costs now instead of what it cost before."""
        cost = entry_cost(entry)
        change, entry.cost = cost - entry.cost, cost
        if change >= 0:
            self._memory.add(change)
        else:
            self._memory.release(-change)

    def forget(self, entry: Entry) -> None:
        """The message left this queue for good (acked, dropped, delivered without ack)."""
        if self._dedup is not None:
            self._dedup.left(entry)
        if entry.cost:
            self._memory.release(entry.cost)
            entry.cost = 0
        if entry.stored_id and self.store is not None:
            self.store.remove(self.store_key, entry.stored_id)
            entry.stored_id = 0

    def note_delivered(self, entry: Entry) -> None:
        """A persisted message went out with an ack pending: after a crash it is redelivered
        (and, in a queue that counts, counted as returned once more)."""
        if entry.stored_id and self.store is not None and (entry.returns or not entry.redelivered):
            self.store.delivered(self.store_key, entry.stored_id, entry.returns)

    def _expired(self, entries: list[Entry]) -> None:
        self.dead_letter(entries, "expired")

    def dead_letter(self, entries: list[Entry], reason: str) -> None:
        """Messages leave for good, to the dead-letter exchange if the queue has one, in the
        order they died; paged-out ones are read back first (paging.DeadLetters)."""
        self._dead_letters.send(entries, reason)

    def purge(self) -> int:
        count = self.message_count
        for entry in self.returns.take_all():
            self.forget(entry)
        for entry in self.ready:
            if self._dedup is not None:
                self._dedup.left(entry)
            if entry.stored_id and self.store is not None:
                self.store.remove(self.store_key, entry.stored_id)
        self._memory.release(sum(entry.cost for entry in self.ready))
        self.ready.clear()
        self.ready_bytes = 0
        self.pager.cleared()
        return count

    # -- x-expires ----------------------------------------------------------------------

    def touch(self) -> None:
        """The queue was used (declared, got from, consumed from): restart x-expires."""
        if not self.deleted:
            self._idle.touch()

    def _on_idle(self) -> None:
        if not self.deleted and self.on_unused is not None:
            self.on_unused(self)

    def delete(self) -> None:
        """The vhost is deleting the queue: timers stop, dispatch and dead-lettering end."""
        self.deleted = True
        self._ttl.cancel()
        self.returns.cancel()
        self._idle.cancel()

    # -- consumers ----------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers[consumer] = None
        self.choice.joined(consumer)
        self._had_consumer = True
        self.touch()
        self.schedule_dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        self.choice.leaving(consumer)
        if self.consumers.pop(consumer, False) is False:
            return
        self.choice.left(consumer)
        if self.consumers:
            if self.args.single_active_consumer:
                self.schedule_dispatch()  # the next consumer takes over
            return
        self.touch()
        if self.auto_delete and self._had_consumer and self.on_unused is not None:
            self.on_unused(self)

    def drop_consumers(self) -> None:
        """The queue is gone: forget every consumer (their channels were told already)."""
        for consumer in self.consumers:
            self.choice.left(consumer)
        self.consumers.clear()

    def has_exclusive_consumer(self) -> bool:
        return self.choice.has_exclusive

    def unpark(self, consumer: Consumer) -> None:
        """A parked consumer has capacity again (its channel says so): give it its turns back."""
        if self.choice.unpark(consumer) and self.ready:
            self.schedule_dispatch()

    def schedule_dispatch(self, next_turn: bool = False) -> None:
        if not self._dispatch_scheduled and not self.deleted:
            self._dispatch_scheduled = True
            scheduler = self._scheduler
            (scheduler.call_next_turn if next_turn else scheduler.call_soon)(self._dispatch)

    def _dispatch(self) -> None:
        self._dispatch_scheduled = False
        self.dispatch_now()

    def dispatch_now(self) -> None:
        """Hand out ready messages in this turn, not the next: requeueing one consumer's
        deliveries at a time (Channel._give_back) offers each group before the next returns."""
        if self.deleted:
            return
        for _ in range(DISPATCH_BATCH):
            if self._getters or not self._head_ready():
                return  # empty, or the head is being read: its landing dispatches again
            consumer = self.choice.pick()
            if consumer is None:
                return
            entry = self._pop()
            assert entry is not None
            consumer.channel.deliver(consumer, entry)
        if self.ready:  # a full batch went out: the rest after other connections' turns
            self.schedule_dispatch(next_turn=True)
