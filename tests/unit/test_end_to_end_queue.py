"""An end-to-end queue's bookkeeping on a fake clock: the confirm travels with the entry,
a deletion nacks what its publishers still wait for, and the ledgers it remembers for
that are pruned as publishing channels close."""

from __future__ import annotations

from pamqp import commands

from kanin.core.confirms import ConfirmLedger, ConfirmTicket
from kanin.core.memory import MemoryMonitor
from kanin.core.message import Message
from kanin.core.queue_args import parse_queue_args
from kanin.core.queues.end_to_end import EndToEndQueue
from kanin.testing.clock import FakeScheduler


def make_queue(clock: FakeScheduler) -> EndToEndQueue:
    arguments: dict[str, object] = {"x-confirm-on-ack": True}
    args = parse_queue_args(arguments, "q", "/")
    return EndToEndQueue("q", "/", clock, MemoryMonitor(2**40), arguments=arguments, args=args)


def publish(queue: EndToEndQueue, ledger: ConfirmLedger, body: bytes = b"m") -> int:
    seq = ledger.next_seq()
    ledger.hold(seq, queue.as_party)
    message = Message("", "q", b"", body, commands.Basic.Properties(), None)
    queue.publish_with_ticket(message, ConfirmTicket(ledger, seq))
    return seq


def test_an_ack_of_the_entry_confirms_its_publish_and_only_that() -> None:
    queue, ledger = make_queue(FakeScheduler()), ConfirmLedger()
    publish(queue, ledger, b"one")
    publish(queue, ledger, b"two")
    queue.take()
    second = queue.take()
    assert second is not None and second.ticket is not None
    queue.forget(second)  # acked by its consumer
    assert second.ticket is None, "settled once"
    assert ledger.drain() == ([], [(2, False)])


def test_deleting_nacks_ready_and_delivered_alike_and_later_acks_settle_nothing() -> None:
    queue, ledger = make_queue(FakeScheduler()), ConfirmLedger()
    publish(queue, ledger, b"ready")
    publish(queue, ledger, b"delivered")
    other = ConfirmLedger()
    publish(queue, other)
    first = queue.take()
    assert first is not None
    queue.delete()
    queue.forget(first)  # its consumer acks after the queue is gone
    assert ledger.drain() == ([1, 2], [])
    assert other.drain() == ([1], [])


def test_the_ledgers_of_closed_channels_are_not_kept() -> None:
    queue = make_queue(FakeScheduler())
    live = ConfirmLedger()
    publish(queue, live)
    for _ in range(1_000):  # short-lived publishing channels
        ledger = ConfirmLedger()
        publish(queue, ledger)
        ledger.close()
    assert len(queue._ledgers) <= 32
    queue.delete()
    assert live.drain() == ([1], [])
