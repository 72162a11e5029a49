"""UnackedLedger: the rules in kanin/core/unacked.py's docstring (RabbitMQ's collect_acks)."""

from __future__ import annotations

import pytest

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError, ConnectionError_
from kanin.core.memory import MemoryMonitor
from kanin.core.message import Entry
from kanin.core.queues import ClassicQueue
from kanin.core.unacked import Unacked, UnackedLedger
from kanin.testing.clock import FakeScheduler

# Real queue and entries (the compiled build checks the declared types at run time); the
# ledger only keeps them. An entry's seq is its delivery's tag, so tests can tell them apart.
QUEUE = ClassicQueue("q", "/", FakeScheduler(), MemoryMonitor(2**40))


def deliver(ledger: UnackedLedger, count: int) -> list[int]:
    """`count` acked-mode deliveries; returns their tags."""
    tags = []
    for _ in range(count):
        tag = ledger.next_tag()
        ledger.add(Unacked(tag, QUEUE, Entry(None, tag, size=1), None))
        tags.append(tag)
    return tags


def tags_of(records: list[Unacked]) -> list[int]:
    return [record.tag for record in records]


def outstanding(ledger: UnackedLedger) -> list[int]:
    """Outstanding tags in order, leaving the ledger as it was."""
    records = ledger.take_all()
    ledger.restore(records)
    return tags_of(records)


def assert_unknown_tag(ledger: UnackedLedger, tag: int, multiple: bool) -> None:
    with pytest.raises(ChannelError) as info:
        ledger.settle(tag, multiple)
    error = info.value
    assert not isinstance(error, ConnectionError_)  # a channel error, not a connection one
    assert error.reply_code == C.PRECONDITION_FAILED == 406
    assert error.reply_text == f"PRECONDITION_FAILED - unknown delivery tag {tag}"


def test_tags_start_at_one_and_grow_by_one() -> None:
    ledger = UnackedLedger()
    assert [ledger.next_tag() for _ in range(5)] == [1, 2, 3, 4, 5]


def test_no_ack_deliveries_use_up_tags_without_being_outstanding() -> None:
    ledger = UnackedLedger()
    ledger.next_tag()  # a no-ack delivery: tag 1 is reserved but never added
    assert deliver(ledger, 2) == [2, 3]
    assert len(ledger) == 2
    assert_unknown_tag(ledger, 1, False)
    assert len(ledger) == 2


def test_len_counts_outstanding() -> None:
    ledger = UnackedLedger()
    assert len(ledger) == 0
    deliver(ledger, 3)
    assert len(ledger) == 3
    ledger.settle(2, False)
    assert len(ledger) == 2


def test_ack_multiple_5_to_8_settles_four() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 8)
    assert tags_of(ledger.settle(4, True)) == [1, 2, 3, 4]
    settled = ledger.settle(8, True)
    assert tags_of(settled) == [5, 6, 7, 8]
    assert len(ledger) == 0


def test_ack_multiple_settles_only_tags_up_to_it() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 10)
    assert tags_of(ledger.settle(6, True)) == [1, 2, 3, 4, 5, 6]
    assert outstanding(ledger) == [7, 8, 9, 10]


def test_ack_without_multiple_settles_only_that_tag() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 8)
    settled = ledger.settle(5, False)
    assert tags_of(settled) == [5]
    assert settled[0].entry.seq == 5
    assert outstanding(ledger) == [1, 2, 3, 4, 6, 7, 8]


def test_ack_multiple_skips_tags_settled_earlier() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 6)
    ledger.settle(2, False)
    ledger.settle(4, False)
    assert tags_of(ledger.settle(5, True)) == [1, 3, 5]
    assert outstanding(ledger) == [6]


def test_tag_zero_multiple_settles_everything() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 5)
    ledger.settle(3, False)
    assert tags_of(ledger.settle(0, True)) == [1, 2, 4, 5]
    assert len(ledger) == 0


def test_tag_zero_multiple_with_nothing_outstanding_is_fine() -> None:
    ledger = UnackedLedger()
    assert ledger.settle(0, True) == []
    deliver(ledger, 2)
    ledger.settle(0, True)
    assert ledger.settle(0, True) == []


def test_tag_zero_without_multiple_is_unknown() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 2)
    assert_unknown_tag(ledger, 0, False)
    assert len(ledger) == 2


@pytest.mark.parametrize("multiple", [False, True])
def test_unknown_tag_is_precondition_failed(multiple: bool) -> None:
    ledger = UnackedLedger()
    deliver(ledger, 3)
    assert_unknown_tag(ledger, 4, multiple)
    assert_unknown_tag(ledger, 10**12, multiple)
    assert len(ledger) == 3  # a failed ack settles nothing


@pytest.mark.parametrize("multiple", [False, True])
def test_double_ack_is_precondition_failed(multiple: bool) -> None:
    ledger = UnackedLedger()
    deliver(ledger, 3)
    ledger.settle(2, False)
    assert_unknown_tag(ledger, 2, multiple)
    assert outstanding(ledger) == [1, 3]


def test_multiple_ack_for_a_settled_tag_settles_nothing_below_it() -> None:
    """RabbitMQ fails the whole ack: lower outstanding tags stay outstanding."""
    ledger = UnackedLedger()
    deliver(ledger, 5)
    ledger.settle(4, False)
    assert_unknown_tag(ledger, 4, True)
    assert outstanding(ledger) == [1, 2, 3, 5]


def test_multiple_ack_repeated_is_precondition_failed() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 3)
    ledger.settle(3, True)
    assert_unknown_tag(ledger, 3, True)


def test_take_all_returns_everything_in_delivery_order() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 6)
    ledger.settle(3, False)
    assert tags_of(ledger.take_all()) == [1, 2, 4, 5, 6]
    assert len(ledger) == 0
    assert ledger.take_all() == []
    assert ledger.next_tag() == 7  # tags keep growing after a recover


def test_restore_keeps_tag_order() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 8)
    first = ledger.settle(2, False)
    middle = ledger.settle(6, True)  # 1, 3, 4, 5, 6
    assert outstanding(ledger) == [7, 8]
    ledger.restore(middle)
    ledger.restore(first)
    assert outstanding(ledger) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert tags_of(ledger.settle(4, True)) == [1, 2, 3, 4]  # walk from the front still works
    assert tags_of(ledger.settle(0, True)) == [5, 6, 7, 8]


def test_restore_keeps_order_with_later_deliveries() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 3)
    settled = ledger.settle(3, True)
    deliver(ledger, 2)  # 4, 5 delivered after the (rolled back) ack
    ledger.restore(settled)
    assert tags_of(ledger.settle(2, True)) == [1, 2]
    assert tags_of(ledger.take_all()) == [3, 4, 5]


def test_restore_of_nothing_changes_nothing() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 2)
    ledger.restore([])
    assert outstanding(ledger) == [1, 2]


def test_restored_records_are_the_same_objects() -> None:
    ledger = UnackedLedger()
    deliver(ledger, 2)
    settled = ledger.settle(2, True)
    ledger.restore(settled)
    again = ledger.settle(0, True)
    assert [id(r) for r in again] == [id(r) for r in settled]
