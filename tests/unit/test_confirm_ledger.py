"""ConfirmLedger: the rules in kanin/core/confirms.py's docstring (RabbitMQ's coalesce_and_send)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from kanin.core.confirms import ConfirmLedger

if TYPE_CHECKING:
    from kanin.store.api import MessageStore


def publish(ledger: ConfirmLedger, count: int, hold: bool = False) -> list[int]:
    seqs = [ledger.next_seq() for _ in range(count)]
    for seq in seqs:
        if hold:
            ledger.hold(seq)
        else:
            ledger.confirm(seq)
    return seqs


def test_seq_starts_at_one_and_grows_by_one() -> None:
    ledger = ConfirmLedger()
    assert [ledger.next_seq() for _ in range(4)] == [1, 2, 3, 4]


def test_nothing_to_drain_initially() -> None:
    ledger = ConfirmLedger()
    assert not ledger.has_output()
    assert ledger.drain() == ([], [])
    assert ledger.pending_count == 0


def test_single_ack_is_not_multiple() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 1)
    assert ledger.has_output()
    assert ledger.drain() == ([], [(1, False)])
    assert not ledger.has_output()
    assert ledger.drain() == ([], [])


def test_acks_with_nothing_pending_coalesce_into_one_multiple_ack() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 5)
    assert ledger.drain() == ([], [(5, True)])


def test_acks_are_sorted_before_coalescing() -> None:
    ledger = ConfirmLedger()
    seqs = [ledger.next_seq() for _ in range(4)]
    for seq in seqs:
        ledger.hold(seq)
    for seq in (3, 1, 4, 2):
        ledger.confirm(seq)
    assert ledger.drain() == ([], [(4, True)])


def test_acks_below_the_smallest_pending_coalesce_and_the_rest_go_one_by_one() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 3)  # 1, 2, 3 acked
    (held,) = publish(ledger, 1, hold=True)  # 4 pending
    publish(ledger, 2)  # 5, 6 acked
    assert held == 4
    assert ledger.pending_count == 1
    assert ledger.drain() == ([], [(3, True), (5, False), (6, False)])
    ledger.confirm(4)
    assert ledger.pending_count == 0
    assert ledger.drain() == ([], [(4, False)])


def test_one_ack_below_pending_is_not_multiple() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 1)
    publish(ledger, 1, hold=True)
    assert ledger.drain() == ([], [(1, False)])


def test_nothing_acked_below_pending_sends_single_acks() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 1, hold=True)
    publish(ledger, 3)
    assert ledger.drain() == ([], [(2, False), (3, False), (4, False)])


def test_pending_publish_confirmed_later() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 2, hold=True)
    assert not ledger.has_output()
    assert ledger.drain() == ([], [])
    ledger.confirm(2)
    assert ledger.drain() == ([], [(2, False)])
    ledger.confirm(1)
    assert ledger.drain() == ([], [(1, False)])
    assert ledger.pending_count == 0


def test_nacks_come_one_by_one_before_acks() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 3, hold=True)
    ledger.reject(3)
    ledger.reject(1)
    ledger.confirm(2)
    nacks, acks = ledger.drain()
    assert nacks == [3, 1]
    assert acks == [(2, False)]
    assert ledger.pending_count == 0


def test_rejected_pending_publish_is_no_longer_pending() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 1, hold=True)
    publish(ledger, 1)
    ledger.reject(1)
    assert ledger.pending_count == 0
    assert ledger.drain() == ([1], [(2, False)])
    assert ledger.drain() == ([], [])


def test_nack_from_an_earlier_drain_may_lie_below_a_later_multiple_ack() -> None:
    """As in RabbitMQ: the client settled seq 1 already, so ack 3 multiple covers 2 and 3."""
    ledger = ConfirmLedger()
    publish(ledger, 2, hold=True)
    ledger.reject(1)
    assert ledger.drain() == ([1], [])
    publish(ledger, 1)
    ledger.confirm(2)
    assert ledger.drain() == ([], [(3, True)])


def test_multiple_ack_never_spans_a_nack_of_the_same_drain() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 1, hold=True)
    publish(ledger, 2)  # 2, 3 acked
    ledger.reject(1)
    nacks, acks = ledger.drain()
    assert nacks == [1]
    for tag, multiple in acks:
        assert not (multiple and tag > 1), f"ack {tag} multiple=true also covers nacked seq 1"


def test_every_seq_is_reported_exactly_once() -> None:
    ledger = ConfirmLedger()
    reported: list[int] = []
    client_outstanding: set[int] = set()

    def drain() -> None:
        nacks, acks = ledger.drain()
        for seq in nacks:
            assert seq in client_outstanding
            client_outstanding.discard(seq)
            reported.append(seq)
        for tag, multiple in acks:
            covered = sorted(s for s in client_outstanding if s <= tag) if multiple else [tag]
            assert tag in client_outstanding
            for seq in covered:
                client_outstanding.discard(seq)
                reported.append(seq)

    for round_ in range(5):
        seqs = [ledger.next_seq() for _ in range(4)]
        client_outstanding.update(seqs)
        held = []
        for i, seq in enumerate(seqs):
            kind = (i + round_) % 3
            if kind == 0:
                ledger.hold(seq)
                held.append(seq)
            elif kind == 1:
                ledger.confirm(seq)
            else:
                ledger.reject(seq)
        drain()
        if round_ % 2:
            for seq in held:
                ledger.confirm(seq)
        drain()
    for seq in range(1, 21):
        if seq not in reported:
            ledger.confirm(seq)
    drain()
    assert sorted(reported) == list(range(1, 21))
    assert client_outstanding == set()
    assert ledger.pending_count == 0


# -- parties: a publish is acked when everything it waits for is done ------------------------


class RoundsStore:
    """The two store calls a ledger waiting on the disk makes, with rounds ended by hand."""

    def __init__(self) -> None:
        self.round = 1
        self.waiters: dict[int, list[Callable[[bool], None]]] = {}

    def pending_round(self) -> int:
        return self.round

    def after_commit(self, waiter: Callable[[bool], None]) -> None:
        self.waiters.setdefault(self.round, []).append(waiter)

    def end_round(self, ok: bool) -> None:
        for waiter in self.waiters.pop(self.round, []):
            waiter(ok)
        self.round += 1


def ledger_on_disk() -> tuple[ConfirmLedger, RoundsStore, list[int]]:
    store = RoundsStore()
    flushes: list[int] = []
    ledger = ConfirmLedger(cast("MessageStore", store), lambda: flushes.append(1))
    return ledger, store, flushes


def test_acked_only_when_every_party_is_done() -> None:
    ledger = ConfirmLedger()
    seq = ledger.next_seq()
    ledger.hold(seq, ("queue a", "queue b"))
    ledger.done(seq, "queue a")
    assert ledger.drain() == ([], [])
    ledger.done(seq, "queue a")  # twice is once
    ledger.done(seq, "someone else")  # not a party of this publish
    assert ledger.pending_count == 1
    ledger.done(seq, "queue b")
    assert ledger.drain() == ([], [(1, False)])
    assert ledger.pending_count == 0


def test_each_publish_has_its_own_parties() -> None:
    ledger = ConfirmLedger()
    first, second = ledger.next_seq(), ledger.next_seq()
    ledger.hold(first, ("queue",))
    ledger.hold(second, ("queue",))
    ledger.done(second, "queue")
    assert ledger.drain() == ([], [(2, False)])  # 1 still waits
    ledger.done(first, "queue")
    assert ledger.drain() == ([], [(1, False)])


def test_a_reject_nacks_whatever_is_still_outstanding() -> None:
    ledger = ConfirmLedger()
    seq = ledger.next_seq()
    ledger.hold(seq, ("queue a", "queue b"))
    ledger.done(seq, "queue a")
    ledger.reject(seq)
    ledger.done(seq, "queue b")  # too late: nacked once, never acked as well
    assert ledger.drain() == ([1], [])


def test_disk_party_is_done_when_its_commit_round_ends_well() -> None:
    ledger, store, flushes = ledger_on_disk()
    early = ledger.next_seq()
    ledger.hold(early, disk=True)
    store.round += 1  # round 1 started; what is held now goes to round 2
    late = ledger.next_seq()
    ledger.hold(late, disk=True)
    assert [len(w) for w in store.waiters.values()] == [1, 1]  # one waiter per round
    store.round = 1
    store.end_round(True)
    assert flushes == [1]
    assert ledger.drain() == ([], [(1, False)])
    store.end_round(False)
    assert ledger.drain() == ([2], [])
    assert ledger.pending_count == 0


def test_disk_and_another_party_both_needed() -> None:
    ledger, store, _ = ledger_on_disk()
    seq = ledger.next_seq()
    ledger.hold(seq, ("queue",), disk=True)
    store.end_round(True)
    assert ledger.drain() == ([], [])
    ledger.done(seq, "queue")
    assert ledger.drain() == ([], [(1, False)])


def test_many_publishes_in_one_round_share_one_store_waiter() -> None:
    ledger, store, _ = ledger_on_disk()
    for _ in range(100):
        ledger.hold(ledger.next_seq(), disk=True)
    assert len(store.waiters[1]) == 1
    store.end_round(True)
    assert ledger.drain() == ([], [(100, True)])


def test_a_closed_ledger_reports_nothing_from_later_rounds() -> None:
    ledger, store, flushes = ledger_on_disk()
    ledger.hold(ledger.next_seq(), disk=True)
    ledger.close()
    store.end_round(True)
    assert flushes == []
    assert ledger.drain() == ([], [])
    assert ledger.pending_count == 0


# -- settled from outside a publish (end-to-end queues) ------------------------------------


def test_vouch_and_refuse_settle_a_pending_seq_and_ask_for_a_flush() -> None:
    ledger, _, flushes = ledger_on_disk()
    acked, nacked = ledger.next_seq(), ledger.next_seq()
    ledger.hold(acked, ("queue",))
    ledger.hold(nacked, ("queue",))
    ledger.vouch(acked, "queue")
    ledger.refuse(nacked)
    assert flushes == [1]  # one flush asked for both: it drains all that resolved
    assert ledger.drain() == ([2], [(1, False)])
    ledger.vouch(acked, "queue")  # settled already: nothing, not even a flush
    ledger.refuse(acked)
    assert flushes == [1] and ledger.drain() == ([], [])


def test_a_flush_is_asked_for_again_once_the_last_one_drained() -> None:
    ledger, _, flushes = ledger_on_disk()
    first, second, third = ledger.next_seq(), ledger.next_seq(), ledger.next_seq()
    for seq in (first, second, third):
        ledger.hold(seq, ("queue",))
    ledger.vouch(first, "queue")
    ledger.vouch(second, "queue")
    assert flushes == [1]
    assert ledger.drain() == ([], [(2, True)])
    ledger.refuse(third)
    assert flushes == [1, 1]
    assert ledger.drain() == ([3], [])


def test_a_disk_party_added_later_is_waited_for_too() -> None:
    ledger, store, _ = ledger_on_disk()
    seq = ledger.next_seq()
    ledger.hold(seq, ("queue", "routing"))
    ledger.add_disk(seq)
    ledger.done(seq, "routing")
    ledger.done(seq, "queue")
    assert ledger.drain() == ([], [])  # the disk still
    store.end_round(True)
    assert ledger.drain() == ([], [(1, False)])
    ledger.add_disk(seq)  # no longer pending: nothing to wait for
    assert ledger.pending_count == 0 and store.waiters == {}


def test_held_acks_above_a_pending_seq_wait_for_a_multiple_ack() -> None:
    ledger = ConfirmLedger()
    seqs = publish(ledger, 5, hold=True)
    for seq in seqs[1:]:
        ledger.confirm(seq)  # 2..5 settle first
    assert ledger.drain(hold_above=True) == ([], [])
    assert ledger.holds_acks(), "2..5 wait for 1"
    ledger.confirm(seqs[0])
    assert ledger.drain(hold_above=True) == ([], [(5, True)]), "one frame for all five"
    assert not ledger.holds_acks()


def test_held_acks_go_out_singly_when_no_longer_held() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 3, hold=True)
    ledger.confirm(2)
    ledger.confirm(3)
    assert ledger.drain(hold_above=True) == ([], [])
    assert ledger.drain() == ([], [(2, False), (3, False)])
    assert not ledger.holds_acks()


def test_a_held_ack_goes_out_singly_after_a_whole_holding_period_only() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 4, hold=True)
    ledger.confirm(2)
    assert ledger.drain(hold_above=True) == ([], [])  # 2 waits for 1
    ledger.age_held()  # a period ends: 2 was held through only part of it
    ledger.confirm(3)
    assert ledger.drain(hold_above=True) == ([], []), "2 and 3 wait one more period"
    ledger.confirm(4)
    assert ledger.drain(hold_above=True) == ([], [])
    ledger.age_held()  # 2 and 3 were held through a whole period; 4 was not
    assert ledger.drain(hold_above=True) == ([], [(2, False), (3, False)])
    assert ledger.holds_acks(), "4 waits for the next period's end"
    ledger.confirm(1)
    assert ledger.drain(hold_above=True) == ([], [(4, True)]), "1 and 4 in one frame"
    assert not ledger.holds_acks()


def test_holding_never_delays_acks_below_the_floor() -> None:
    ledger = ConfirmLedger()
    publish(ledger, 4, hold=True)
    for seq in (1, 2, 4):
        ledger.confirm(seq)
    assert ledger.drain(hold_above=True) == ([], [(2, True)])
    assert ledger.holds_acks(), "4 waits for 3"


def test_vouching_for_a_round_acks_only_what_waited_for_that_party_alone() -> None:
    resolved: list[None] = []
    ledger = ConfirmLedger(on_resolved=lambda: resolved.append(None))
    stream, other = object(), object()
    seqs = [ledger.next_seq() for _ in range(4)]
    ledger.hold(seqs[0], [stream])
    ledger.hold(seqs[1], [stream, other])
    ledger.hold(seqs[2], [other])
    ledger.confirm(seqs[3])
    for seq in seqs:  # a stream's commit round, as StreamQueue._settle vouches
        ledger.vouch(seq, stream)
    assert len(resolved) == 1, "one flush for the whole round"
    assert ledger.drain() == ([], [(1, False), (4, False)])
    assert ledger.pending_count == 2
    ledger.done(seqs[1], other)
    ledger.done(seqs[2], other)
    assert ledger.drain() == ([], [(3, True)])
