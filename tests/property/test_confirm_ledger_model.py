"""A stateful property test of ConfirmLedger (kanin/core/confirms.py) against a plain model:
random publishes (confirmed at once, rejected at once, or held on one or two parties),
parties that vouch, rejects of held publishes, drains with and without holding acks
above the smallest pending seq, and the ends of holding periods (age_held).

The model keeps every acked seq not yet sent in one list and, on each drain, sorts it and
cuts it at the smallest seq still pending or nacked in the same drain (found by scanning):
the coalescing rules in their plainest form. A held ack remembers whether a period ended
while it was held; one that is held through a whole period goes out singly at the drain
after the next period's end. Each drain must return exactly what the model's does. A
client's view checks the rules themselves: every seq is confirmed once, and a multiple
ack covers only seqs the broker has acked.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kanin.core.confirms import ConfirmLedger

PARTIES = ("queue a", "queue b")


class ModelLedger:
    def __init__(self) -> None:
        self.pending: dict[int, set[str]] = {}
        self.acked: list[int] = []  # resolved since the last drain
        self.held: dict[int, bool] = {}  # held back by a drain -> held through a period end
        self.nacked: list[int] = []
        self.period_over = False  # age_held since the last drain, with acks held

    def age_held(self) -> None:
        self.period_over = bool(self.held)

    def drain(self, hold_above: bool) -> tuple[list[int], list[tuple[int, bool]]]:
        nacks, self.nacked = self.nacked, []
        acked, self.acked = sorted(self.acked + list(self.held)), []
        if not acked:
            return nacks, []
        stops = list(self.pending) + nacks
        floor = min(stops) if stops else None
        below = [seq for seq in acked if floor is None or seq < floor]
        above = acked[len(below) :]
        acks = [(below[-1], len(below) > 1)] if below else []
        old = {seq: self.held.get(seq, False) for seq in above}
        if not hold_above:
            due = above
        elif self.period_over:
            due = [seq for seq in above if old[seq]]
        else:
            due = []
        acks += [(seq, False) for seq in due]
        self.held = {seq: self.period_over or old[seq] for seq in above if seq not in due}
        self.period_over = False
        return nacks, acks


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ledger = ConfirmLedger()
        self.model = ModelLedger()
        self.outstanding: set[int] = set()  # published, not yet confirmed to the client
        self.confirmed: list[int] = []  # as the client saw them
        self.sent_acks = 0

    @rule(how=st.sampled_from(["ack", "nack", "a", "b", "a and b"]))
    def publish(self, how: str) -> None:
        seq = self.ledger.next_seq()
        self.outstanding.add(seq)
        if how == "ack":
            self.ledger.confirm(seq)
            self.model.acked.append(seq)
        elif how == "nack":
            self.ledger.reject(seq)
            self.model.nacked.append(seq)
        else:
            parties = [p for p in PARTIES if p[-1] in how.split(" and ")]
            self.ledger.hold(seq, parties)
            self.model.pending[seq] = set(parties)

    @precondition(lambda self: self.model.pending)
    @rule(pick=st.integers(0, 10**6), party=st.sampled_from(PARTIES))
    def vouch(self, pick: int, party: str) -> None:
        seqs = sorted(self.model.pending)
        seq = seqs[pick % len(seqs)]
        self.ledger.vouch(seq, party)
        waiting = self.model.pending[seq]
        waiting.discard(party)
        if not waiting:
            del self.model.pending[seq]
            self.model.acked.append(seq)

    @precondition(lambda self: self.model.pending)
    @rule(pick=st.integers(0, 10**6))
    def refuse(self, pick: int) -> None:
        seqs = sorted(self.model.pending)
        seq = seqs[pick % len(seqs)]
        self.ledger.refuse(seq)
        del self.model.pending[seq]
        self.model.nacked.append(seq)

    @rule()
    def age_held(self) -> None:
        self.ledger.age_held()
        self.model.age_held()

    @rule(hold_above=st.booleans())
    def drain(self, hold_above: bool) -> None:
        before = self.ledger.acks_drained
        nacks, acks = self.ledger.drain(hold_above)
        assert (nacks, acks) == self.model.drain(hold_above)
        for seq in nacks:
            self.outstanding.remove(seq)
            self.confirmed.append(seq)
        acked = 0
        for tag, multiple in acks:
            covered = sorted(s for s in self.outstanding if s <= tag) if multiple else [tag]
            assert tag in self.outstanding
            for seq in covered:
                assert seq not in self.model.pending, f"ack {tag} covers pending {seq}"
                self.outstanding.remove(seq)
                self.confirmed.append(seq)
            acked += len(covered)
        assert self.ledger.acks_drained - before == acked

    @invariant()
    def agrees_on_what_is_left(self) -> None:
        assert self.ledger.pending_count == len(self.model.pending)
        assert self.ledger.holds_acks() == bool(self.model.acked or self.model.held)
        assert len(self.confirmed) == len(set(self.confirmed)), "a seq confirmed twice"

    def teardown(self) -> None:
        for seq in list(self.model.pending):  # settle what is left: all of it goes out
            self.ledger.confirm(seq)
            del self.model.pending[seq]
            self.model.acked.append(seq)
        self.drain(hold_above=False)
        assert self.outstanding == set()
        assert sorted(self.confirmed) == list(range(1, self.ledger.next_seq()))


LedgerMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60)
test_ledger_against_model = LedgerMachine.TestCase
