"""The unacked ledger of one channel: delivery tag -> what was delivered.

Rules (RabbitMQ's, from rabbit_channel collect_acks; https://www.rabbitmq.com/confirms.html):
- Tags start at 1 and grow by 1 per delivery on the channel (consume and get alike).
- settle(tag, multiple=False) removes exactly that tag.
- settle(tag, multiple=True) removes every outstanding tag <= tag.
- settle(0, multiple=True) removes everything outstanding.
- A tag that is not outstanding (unknown, already settled, another channel's) is
  an error, 406 "unknown delivery tag N", even with multiple=True.
Tags are handed out in increasing order and dicts keep insertion order, so
"everything <= tag" is a walk from the front that stops early.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError

if TYPE_CHECKING:
    from kanin.core.consumer import Consumer
    from kanin.core.message import Entry
    from kanin.core.queues import Queue


class Unacked:
    """One delivery awaiting its ack."""

    __slots__ = ("consumer", "entry", "queue", "tag")

    def __init__(self, tag: int, queue: Queue, entry: Entry, consumer: Consumer | None) -> None:
        self.tag = tag
        self.queue = queue
        self.entry = entry
        self.consumer = consumer  # None for basic.get


class UnackedLedger:
    def __init__(self) -> None:
        self._next_tag = 1
        self._outstanding: dict[int, Unacked] = {}

    def __len__(self) -> int:
        return len(self._outstanding)

    def next_tag(self) -> int:
        """Reserve the next delivery tag (also used for no-ack deliveries)."""
        tag = self._next_tag
        self._next_tag += 1
        return tag

    def peek_tag(self) -> int:
        return self._next_tag

    def add(self, record: Unacked) -> None:
        self._outstanding[record.tag] = record

    def settle(self, tag: int, multiple: bool) -> list[Unacked]:
        outstanding = self._outstanding
        if multiple and tag == 0:
            settled = list(outstanding.values())
            outstanding.clear()
            return settled
        if tag not in outstanding:
            raise ChannelError(C.PRECONDITION_FAILED, f"unknown delivery tag {tag}")
        if not multiple:
            return [outstanding.pop(tag)]
        settled = []
        for key in list(outstanding):
            if key > tag:
                break
            settled.append(outstanding.pop(key))
        return settled

    def outstanding(self) -> Iterable[Unacked]:
        """What awaits its ack, in delivery order (the consumer timeout looks here)."""
        return self._outstanding.values()

    def take_all(self) -> list[Unacked]:
        """Everything outstanding, in delivery order (channel closing, basic.recover)."""
        settled = list(self._outstanding.values())
        self._outstanding.clear()
        return settled

    def restore(self, records: list[Unacked]) -> None:
        """Put settled deliveries back as outstanding (tx.rollback), keeping tag order."""
        if not records:
            return
        merged = list(self._outstanding.values()) + records
        merged.sort(key=lambda record: record.tag)
        self._outstanding = {record.tag: record for record in merged}
