"""Messages that come back to their queue: counted, dead-lettered past a limit, held back.

How this works:
- A queue that counts deliveries (quorum always; classic with x-delivery-limit or a
  backoff) adds one to a message's `returns` each time it comes back: a nack or reject
  with requeue, basic.recover, or its consumer's channel or connection closing with it
  unacked, as RabbitMQ 3.10's quorum queues count. Its next delivery carries the count as
  the `x-delivery-count` header (`delivery_count_header`); a consumer's first delivery
  carries the publisher's header bytes unchanged, a basic.get always says the count, 0
  the first time. The count reaches the store with each delivery mark, so it survives a
  restart (store/api.py, MessageStore.delivered).
- With x-delivery-limit N a message may come back N times: the return after that
  dead-letters it with reason `delivery_limit` instead (N+1 deliveries in all).
- With a backoff (x-delayed-retry-*, QueueArgs.returns.backoff_ms) a returned message
  waits before it is ready again. Waiting messages sit on a timing wheel
  (core/timing_wheel.py) with one scheduler timer for the earliest; the rest of the
  queue keeps flowing meanwhile.
- After a restart a message that was out, or waiting, counts the crash as one more return
  of kind RETURNED: past the limit it is dead-lettered, and with a backoff for that kind
  it waits again, from the restart. Those messages are paged out: read back when due.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kanin.amqp.tables import LongLong, encode_header_with
from kanin.core.message import Entry, Message
from kanin.core.paging import message_of
from kanin.core.queue_args import RETURNED, UNSENT, ReturnArgs
from kanin.core.timing_wheel import TimingWheel

if TYPE_CHECKING:
    from kanin.core.scheduling import Cancellable, Scheduler
    from kanin.store.api import Content, MessageStore

log = logging.getLogger(__name__)

DELIVERY_COUNT = "x-delivery-count"
# What became of a recovered message (Returns.restored).
READY, HELD, SPENT = "ready", "held", "spent"


def delivery_count_header(message: Message, count: int) -> bytes:
    """The message's content header with x-delivery-count set to `count` (a 64-bit 'l',
    as RabbitMQ writes it), replacing any the publisher set; RabbitMQ sorts a header table
    it changes, and so does this."""
    properties = message.properties
    headers = {**(properties.headers or {}), DELIVERY_COUNT: LongLong(count)}
    header = encode_header_with(len(message.body), properties, dict(sorted(headers.items())))
    message.shed_properties()  # a queued message keeps only its bytes (see Message)
    return header


class Returns:
    """One queue's returned messages (see the module docstring). The queue hands over what
    comes back with `take_back`, and gets back what may be ready now; what waits comes back
    later through `ready_again`, and what is spent goes to `dead_letter`."""

    def __init__(
        self,
        policy: ReturnArgs,
        scheduler: Scheduler,
        store: MessageStore | None,
        key: str,
    ) -> None:
        self.policy = policy
        self._scheduler = scheduler
        self._store = store
        self._key = key
        # Set by the queue: where spent messages go, and where waiting ones go when due.
        self.dead_letter: Callable[[list[Entry], str], None] = lambda entries, reason: None
        self.ready_again: Callable[[list[Entry]], None] = lambda entries: None
        self._waiting: dict[Entry, None] = {}  # held back, in the wheel or being read back
        self._wheel: TimingWheel[Entry] | None = None
        self._timer: Cancellable | None = None
        self._timer_due_ms = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def take_back(self, entries: list[Entry], how: str) -> list[Entry]:
        """Delivered messages come back: the ones to put back in the queue now. The others
        are dead-lettered (past the limit) or held back (backoff)."""
        if not self.policy.counts or how == UNSENT:
            return entries
        ready, spent = [], []
        for entry in entries:
            entry.returns += 1
            if self._spent(entry):
                spent.append(entry)
            elif not self._held_back(entry, how):
                ready.append(entry)
        if spent:
            self.dead_letter(spent, "delivery_limit")
        return ready

    def restored(self, entry: Entry, returns: int) -> str:
        """A recovered message with its count, returned by the restart if it was out: READY,
        HELD (back, till its backoff ends) or SPENT (the caller dead-letters it)."""
        entry.returns = returns
        if not returns:
            return READY
        if self._spent(entry):
            return SPENT
        return HELD if self._held_back(entry, RETURNED) else READY

    def _spent(self, entry: Entry) -> bool:
        limit = self.policy.limit
        return limit is not None and entry.returns > limit

    def _held_back(self, entry: Entry, how: str) -> bool:
        delay_ms = self.policy.backoff_ms(entry.returns, how)
        if not delay_ms:
            return False
        now_ms = self._now_ms()
        if self._wheel is None:
            self._wheel = TimingWheel(now_ms=now_ms)
        self._wheel.insert(entry, now_ms + delay_ms)
        self._waiting[entry] = None
        self._arm(now_ms)
        return True

    def take_all(self) -> list[Entry]:
        """Purge and deletion: every message held back, which will not come back now."""
        waiting = list(self._waiting)
        self._waiting.clear()
        self._wheel = None
        self.cancel()
        return waiting

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- the timer ------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return round(self._scheduler.time() * 1000)

    def _arm(self, now_ms: int) -> None:
        """One timer, for the earliest message held back."""
        due_ms = self._wheel.next_due_ms() if self._wheel is not None else None
        if due_ms is None or (self._timer is not None and self._timer_due_ms <= due_ms):
            return
        self.cancel()
        self._timer_due_ms = due_ms
        # At least a millisecond: a timer never spins on a due time the clock just reached.
        self._timer = self._scheduler.call_later(max(due_ms - now_ms, 1) / 1000, self._on_due)

    def _on_due(self) -> None:
        self._timer = None
        if self._wheel is None:
            return
        now_ms = self._now_ms()
        due = [entry for entry in self._wheel.advance(now_ms) if entry in self._waiting]
        self._arm(now_ms)
        if due:
            self._load(due)

    def _load(self, due: list[Entry]) -> None:
        """Messages held back since a restart are paged out: read them back first."""
        paged = [entry for entry in due if entry.message is None and entry.stored_id]
        if not paged:
            self._release(due)
            return
        assert self._store is not None, "only a durable queue pages messages out"
        ids = [entry.stored_id for entry in paged]
        self._store.read_later(self._key, ids, (), functools.partial(self._loaded, due, paged))

    def _loaded(self, due: list[Entry], paged: list[Entry], contents: list[Content | None]) -> None:
        for entry, content in zip(paged, contents, strict=True):
            if content is not None:
                entry.message = message_of(content)
            else:
                log.error("message %d could not be read back after its backoff", entry.stored_id)
        self._release(due)

    def _release(self, due: list[Entry]) -> None:
        """Ready again: those still held (not purged meanwhile) go back to the queue."""
        waiting, ready = self._waiting, []
        for entry in due:
            if entry in waiting:
                del waiting[entry]
                ready.append(entry)
        if ready:
            self.ready_again(ready)
