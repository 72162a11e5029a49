"""x-confirm-on-ack: a classic queue whose publishers are confirmed when a consumer acks.

A publisher in confirm mode learns, from the ordinary basic.ack, that a consumer of the
queue has taken and acknowledged its message, not only that the broker holds it; a
basic.nack says the message left the queue unprocessed and is the publisher's to send
again. The rules:
- Acked by a consumer (basic.ack, or delivered to an auto-ack consumer or to a
  basic.get with no-ack): the publisher gets basic.ack. Each message's own: an ack of
  message 2 never confirms message 1.
- Dropped: rejected or nacked without requeue (dead-lettered or not), expired, pushed out
  by x-max-length, past x-delivery-limit, purged, or the queue deleted: basic.nack. A
  publish refused by x-overflow reject-publish is nacked at once, as on any queue.
- Requeued (nack or reject with requeue, a consumer's channel closing): still pending.
- x-confirm-timeout (ms, default 30 minutes): a message waits at most this long in the
  queue before it expires (with x-message-ttl, the shorter one counts), so a confirm
  waits at most that plus the consumer timeout of the consumer that has it. It expires
  within a step of that (a second, or a sixteenth of the timeout when shorter): the
  queue reads the clock once a step for this, not once a message (queues/expiry.py).
- A message routed to other queues too is confirmed when every one of them is done: the
  end-to-end ones when acked, the others as confirms normally wait (the disk, for a
  persistent message on a durable queue).
- Nothing is written to the store, persistent or not, durable queue or not: the
  publisher holds every message until it is confirmed, so a broker crash loses only
  unconfirmed messages, which their publishers send again. A durable queue survives a
  restart, empty.
- The publishing channel closing with confirms pending changes nothing for the messages:
  they stay in the queue for consumers; their acks confirm nothing any more.
- With x-message-deduplication on the queue, a publish whose id is held by a message
  still in the queue is not enqueued: its confirm waits for that message's.
- A publish not in confirm mode is enqueued as on a classic queue (and not stored).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kanin.core.paging import DEFAULT_MEMORY_BUDGET_BYTES
from kanin.core.queue_args import QueueArgs
from kanin.core.queues.base import ACCEPTED
from kanin.core.queues.classic import ClassicQueue
from kanin.core.queues.expiry import WaitLimit

if TYPE_CHECKING:
    from kanin.core.confirms import ConfirmLedger, ConfirmTicket
    from kanin.core.memory import MemoryMonitor
    from kanin.core.message import Entry, Message
    from kanin.core.scheduling import Scheduler
    from kanin.store.api import MessageStore


class EndToEndQueue(ClassicQueue):
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
        store: MessageStore | None = None,  # ignored: see the module docstring
        memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    ) -> None:
        # ClassicQueue's parameters spelled out: compiled with mypyc, super().__init__(*args,
        # **kwargs) hands the native __init__ the tuple and the dict as arguments.
        super().__init__(
            name,
            vhost,
            scheduler,
            memory,
            durable=durable,
            exclusive_owner=exclusive_owner,
            auto_delete=auto_delete,
            arguments=arguments,
            args=args,
            store=None,  # see the module docstring: nothing is stored
            memory_budget_bytes=memory_budget_bytes,
        )
        self.settles_confirms = True
        # A queue argument only (no policy sets it): fixed for the queue's life.
        self.wait_limit = WaitLimit(scheduler, self.args.confirm_timeout_ms / 1000)
        # Each entry carries the confirm its ack settles (Entry.ticket); retransmits held
        # for it (x-message-deduplication) wait here, by entry seq.
        self._more_tickets: dict[int, list[ConfirmTicket]] = {}
        # The ledgers of the channels that published here, for a deletion to nack what
        # they still wait for: kept with no work at an ack, and pruned of the closed ones
        # whenever the dict has doubled since the last pruning.
        self._ledgers: dict[ConfirmLedger, None] = {}
        self._prune_at = 16
        self._dropping = False  # a purge forgets messages that were not acked

    def publish_with_ticket(self, message: Message, ticket: ConfirmTicket) -> int:
        if ticket.ledger not in self._ledgers:
            self._add_ledger(ticket.ledger)
        dedup = self._dedup
        key = dedup.key_of(message) if dedup is not None else None
        holder = dedup.holder(key) if dedup is not None and key is not None else None
        if holder is not None:  # a retransmit of a message still here
            self._more_tickets.setdefault(holder.seq, []).append(ticket)
            return ACCEPTED
        return self.publish(message, ticket)

    def _add_ledger(self, ledger: ConfirmLedger) -> None:
        ledgers = self._ledgers
        if len(ledgers) >= self._prune_at:
            for closed in [known for known in ledgers if known.closed]:
                del ledgers[closed]
            self._prune_at = max(16, 2 * len(ledgers))
        ledgers[ledger] = None

    def _settle(self, entry: Entry, acked: bool) -> None:
        ticket = entry.ticket
        if ticket is not None:
            entry.ticket = None
            _settle_ticket(ticket, self, acked)
        if self._more_tickets:
            for retransmit in self._more_tickets.pop(entry.seq, ()):
                _settle_ticket(retransmit, self, acked)

    def forget(self, entry: Entry) -> None:
        self._settle(entry, acked=not self._dropping)
        super().forget(entry)

    def dead_letter(self, entries: list[Entry], reason: str) -> None:
        for entry in entries:
            self._settle(entry, acked=False)
        super().dead_letter(entries, reason)

    def purge(self) -> int:
        for entry in self.ready:
            self._settle(entry, acked=False)
        self._dropping = True  # for the messages held back after a return
        try:
            return super().purge()
        finally:
            self._dropping = False

    def delete(self) -> None:
        """Every publish still waiting for this queue is nacked, whoever holds its entry:
        the entries consumers hold settle nothing when acked later."""
        ledgers, self._ledgers = self._ledgers, {}
        self._more_tickets = {}
        for ledger in ledgers:
            ledger.refuse_party(self)
        super().delete()


def _settle_ticket(ticket: ConfirmTicket, queue: EndToEndQueue, acked: bool) -> None:
    if acked:
        ticket.ledger.vouch(ticket.seq, queue)
    else:
        ticket.ledger.refuse(ticket.seq)
