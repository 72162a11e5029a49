"""ConfirmLedger: the rules in kanin/core/confirms.py's docstring (RabbitMQ's coalesce_and_send)."""

from __future__ import annotations

from kanin.core.confirms import ConfirmLedger


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
