"""The quorum queue, as RabbitMQ 3.10 has it on a single node (no replication yet).

What makes it a quorum queue rather than a classic one, each measured on RabbitMQ 3.10:
- it is durable, not exclusive, not auto-delete (queue_args.py refuses the others, and
  the arguments it has no use for: x-max-priority, x-queue-mode, ...);
- every message is written to disk, persistent or not (its delivery mode is kept), so
  every publisher confirm waits for the disk;
- it counts deliveries (queues/returns.py): x-delivery-count on redeliveries and on every
  basic.get, x-delivery-limit dead-letters with reason `delivery_limit`;
- a returned message does not regain its place: without a delivery limit it goes to the
  back of the queue; with one it goes ahead of the messages never delivered, the
  returned ones in the order they came back;
- a consumer on a channel with a global prefetch limit is refused (540).
Everything else (TTLs, length limits and overflow, dead-lettering, single active
consumer, consumer priorities, deep queues) is the classic queue's machinery.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kanin.core.message import Entry
from kanin.core.queues.classic import ClassicQueue

# Sequence numbers of returned messages in a queue with a delivery limit: below every
# message's own (which start at 1), increasing in the order they came back.
_RETURNED_FIRST = -(1 << 62)


class QuorumQueue(ClassicQueue):
    type_name: ClassVar[str] = "quorum"
    supports_global_qos: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stores_all = True
        self._next_return_seq = _RETURNED_FIRST

    def _return_to_ready(self, entry: Entry) -> None:
        if self.args.returns.limit is None:
            entry.seq = self._next_seq  # to the back, as if published now
            self._next_seq += 1
        else:
            entry.seq = self._next_return_seq  # ahead of the never delivered, in return order
            self._next_return_seq += 1
        self.ready.requeue(entry)
