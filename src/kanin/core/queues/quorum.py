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

from typing import TYPE_CHECKING, Any, ClassVar

from kanin.core.message import Entry
from kanin.core.paging import DEFAULT_MEMORY_BUDGET_BYTES
from kanin.core.queues.classic import ClassicQueue

if TYPE_CHECKING:
    from kanin.core.memory import MemoryMonitor
    from kanin.core.queue_args import QueueArgs
    from kanin.core.scheduling import Scheduler
    from kanin.store.api import MessageStore

# Sequence numbers of returned messages in a queue with a delivery limit: below every
# message's own (which start at 1), increasing in the order they came back.
_RETURNED_FIRST = -(1 << 62)


class QuorumQueue(ClassicQueue):
    type_name: ClassVar[str] = "quorum"
    supports_global_qos: ClassVar[bool] = False

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
            store=store,
            memory_budget_bytes=memory_budget_bytes,
        )
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
