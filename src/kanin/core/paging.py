"""Deep queues: which paged-out messages a queue reads back together, and reading them.

A queue (core/queues/classic.py) keeps ready messages in memory up to its budget; past it, a
persistent message of a durable queue is paged out: its Entry stays (order, expiry,
size, store id) and its content is only in the store. The queue's ledgers and policy
live in queues/classic.py; this module holds the two pieces that need no queue state:
- `page_in_batch`: from the head on, the paged-out entries to read in one batch, and
  the ids of the next batch (the store fetches those ahead of the consumers);
- `read_back`: fill entries' messages from the store in one read.

How a queue pages (queues/classic.py):
Ready messages are held in memory up to the queue's memory budget
  (the broker's `queue_memory_budget_bytes`; 0 with x-queue-mode=lazy). Past it, and
  for as long as any message is paged out, a persistent message of a durable queue
  keeps only its Entry (order, expiry, size, store id): the store has the rest. When
  the head is paged out, the queue reads it back with the paged-out entries behind
  it in one batch, up to the budget (at least PAGE_IN_BYTES_MIN), so consumers are
  served from memory and reads come in batches; it names the batch after that to the
  store, which has the kernel fetch it meanwhile. Dead-lettering reads paged-out
  messages back in batches too; expiring, purging or deleting them reads nothing.
  Transient messages, and everything in non-durable queues, stay in memory. A message
  routed to several durable queues is stored once per queue and each pages it on its
  own: its body leaves memory when the last queue holding it lets go.
  Recovered messages start paged out; start-up reads no bodies. (core/paging.py picks
  the batches and reads them.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import TYPE_CHECKING

from kanin.core.message import Entry, Message

if TYPE_CHECKING:
    from kanin.store.api import MessageStore

# The broker-wide default of ready message bytes a queue keeps in memory.
DEFAULT_MEMORY_BUDGET_BYTES = 4 * 1024 * 1024
# A page-in reads at least this much (so a tiny budget still reads in batches), and at
# most this many messages (so one read stays short).
PAGE_IN_BYTES_MIN = 256 * 1024
PAGE_IN_COUNT_MAX = 1024
# Paged-out messages read back at a time to be dead-lettered.
DEAD_LETTER_BATCH = 256


def page_in_batch(upcoming: Iterable[Entry], room_bytes: int) -> tuple[list[Entry], list[int]]:
    """The paged-out entries among `upcoming` (in order from the head) that fit in
    `room_bytes` (the first always does), at most PAGE_IN_COUNT_MAX; and the store ids of
    as many paged-out entries after them. Entries in memory are skipped."""
    batch: list[Entry] = []
    ahead: list[int] = []
    batch_bytes, full = 0, False
    for entry in islice(upcoming, 2 * PAGE_IN_COUNT_MAX):
        if entry.message is not None:
            continue
        full = full or len(batch) == PAGE_IN_COUNT_MAX or batch_bytes + entry.size > room_bytes
        if full and batch:
            ahead.append(entry.stored_id)
            if len(ahead) == len(batch):
                break
        else:
            batch.append(entry)
            batch_bytes += entry.size
    return batch, ahead


def read_back(
    store: MessageStore, queue_key: str, entries: list[Entry], ahead: Sequence[int] = ()
) -> list[Entry]:
    """Give paged-out entries their messages back from the store, in one read; returns
    those that came back (the others stay paged out: the disk lost them)."""
    contents = store.read(queue_key, [entry.stored_id for entry in entries], ahead)
    loaded = []
    for entry, content in zip(entries, contents, strict=True):
        if content is not None:
            # No properties yet (decoded only if asked), and no CC/BCC list: see Message.
            entry.message = Message(
                content.exchange,
                content.routing_key,
                content.header,
                content.body,
                None,
                None,
                None,
            )
            loaded.append(entry)
    return loaded
