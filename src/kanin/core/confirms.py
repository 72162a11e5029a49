"""The confirm ledger of one channel in confirm mode: publish seq -> outcome.

This ledger is the one place a channel's outstanding publishes are kept; nothing else
holds their sequence numbers. Rules (https://www.rabbitmq.com/confirms.html, modelled on
RabbitMQ's rabbit_confirms and coalesce_and_send):
- Sequence numbers start at 1 and grow by 1 per basic.publish on the channel.
- Every seq is confirmed exactly once, by ack or nack.
- A publish that must wait is *pending* on a set of parties, and is acked when the last
  of them is `done`; `reject` nacks it at once, whatever is still outstanding. A party
  is whatever has to vouch for the message: DISK, the store's commit round that holds
  it (the ledger waits on the round itself: `hold(seq, ..., disk=True)`), or any other
  hashable the caller names and later reports `done` (a queue whose consumer must ack,
  for end-to-end confirms). Publishes with nothing to wait for never enter pending.
- `drain` turns everything resolved since the last drain into frames to send:
  nacks one by one first, then acks, coalesced: all acked seqs below the smallest
  seq still pending or nacked go out as one ack with multiple=true, the rest singly,
  or (`hold_above`) not yet: confirms that resolve out of order (end-to-end queues,
  acked by consumers in their own order) would otherwise cost a frame each. Held acks
  age in two generations: `age_held` marks a period's end (the channel's timer), and at
  the next drain that releases them the acks held since before the previous mark go out
  singly, the younger ones wait one more period. Releasing every held ack at each mark
  sent most of them singly under steady load, where some ack is always held: 63-84% of
  the confirm frames, 3-8 times transient confirms' frames a message.
  A drain costs what resolved since the last one, not what is held: held acks wait in
  sets, and two marks only move up: the smallest pending seq, and the seq below which
  every held ack has been sent; a drain walks each from where it stopped, so every seq
  is passed once by each. (Heaps cost two calls into heapq an ack, a third of what an
  end-to-end confirm cost over a transient one.)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING

from kanin.core.commit_rounds import RoundBatches

if TYPE_CHECKING:
    from kanin.store.api import MessageStore

Party = Hashable
DISK: Party = "disk"  # the store: the commit round holding the message has ended well
_DISK_ONLY: frozenset[Party] = frozenset((DISK,))
# Held with no party named: its caller will confirm or reject it.
_UNTIL_TOLD: frozenset[Party] = frozenset(("until told",))


def _nothing() -> None:
    pass


class ConfirmLedger:
    def __init__(
        self, store: MessageStore | None = None, on_resolved: Callable[[], None] = _nothing
    ) -> None:
        self._next_seq = 1
        self._pending: dict[int, frozenset[Party]] = {}  # seq -> parties not yet done
        # No pending seq lies below: the smallest pending is found from here up (_floor).
        self._low = 1
        self._acked: list[int] = []  # acked since the last drain, in any order
        # Acked, held back by drain(hold_above=True), since the last age_held (young) and
        # since before it (old: out singly at the next drain that releases).
        self._held: set[int] = set()
        self._held_old: set[int] = set()
        # No held ack lies below: a drain sends those below the floor from here up.
        self._sent_below = 1
        self._release_old = False  # age_held was called: the next holding drain releases
        self._nacked: list[int] = []
        # Pending seqs waiting for the disk, by the commit round that holds them.
        self._disk = RoundBatches(store, self._round_ended) if store is not None else None
        self._on_resolved = on_resolved  # something resolved outside a publish: flush soon
        # on_resolved was called and no drain has run since: once per flush, not per ack.
        self._flush_requested = False
        self.acks_drained = 0  # seqs acked by the drains so far (the channel counts them)
        self.closed = False

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def next_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def hold(self, seq: int, parties: Iterable[Party] = (), *, disk: bool = False) -> None:
        """The publish `seq` is confirmed once every party is done (and, with `disk`, the
        store's commit round holding what was recorded so far has ended well). With no
        party at all it stays pending until `confirm` or `reject`."""
        if seq < self._low:  # held after a drain moved the mark past it
            self._low = seq
        if disk and not parties:  # the usual case: persistent, nothing else to wait for
            assert self._disk is not None, "a ledger without a store cannot wait on disk"
            self._disk.add(seq)
            self._pending[seq] = _DISK_ONLY
            return
        # A frozenset is taken as it is: a queue passes its own (Queue.as_party), made once.
        waiting = parties if isinstance(parties, frozenset) else frozenset(parties)
        if disk:
            assert self._disk is not None, "a ledger without a store cannot wait on disk"
            self._disk.add(seq)
            waiting = waiting | _DISK_ONLY if waiting else _DISK_ONLY
        self._pending[seq] = waiting or _UNTIL_TOLD

    def done(self, seq: int, party: Party) -> bool:
        """`party` vouches for `seq`: it is acked if no other party is outstanding.
        Whether `seq` was pending on `party`."""
        pending = self._pending
        waiting = pending.get(seq)
        if waiting is None or party not in waiting:
            return False
        if len(waiting) > 1:
            pending[seq] = waiting - {party}
        else:
            del pending[seq]
            self._acked.append(seq)
        return True

    def add_disk(self, seq: int) -> None:
        """A pending `seq` also waits for the store's current commit round."""
        waiting = self._pending.get(seq)
        if waiting is None:
            return
        assert self._disk is not None, "a ledger without a store cannot wait on disk"
        self._disk.add(seq)
        self._pending[seq] = waiting | _DISK_ONLY

    def vouch(self, seq: int, party: Party) -> None:
        """`done`, from outside a publish (a consumer's ack): the confirm goes out soon."""
        if self.done(seq, party):
            self._request_flush()

    def refuse(self, seq: int) -> None:
        """`reject`, from outside a publish (the message was dropped): the nack goes out soon."""
        if seq in self._pending:
            self.reject(seq)
            self._request_flush()

    def refuse_party(self, party: Party) -> None:
        """`party` is gone (a deleted queue): every publish still waiting for it is nacked."""
        waiting = [seq for seq, parties in self._pending.items() if party in parties]
        for seq in waiting:
            self.reject(seq)
        if waiting:
            self._request_flush()

    def _request_flush(self) -> None:
        if not self._flush_requested:
            self._flush_requested = True
            self._on_resolved()

    def confirm(self, seq: int) -> None:
        """Ack `seq` now (nothing to wait for, or a caller that knows better)."""
        self._pending.pop(seq, None)
        self._acked.append(seq)

    def reject(self, seq: int) -> None:
        """Nack `seq` now, whatever it still waits for."""
        self._pending.pop(seq, None)
        self._nacked.append(seq)

    def close(self) -> None:
        """The channel is gone: nothing it held will be reported."""
        if self._disk is not None:
            self._disk.close()
        self._pending.clear()
        self.closed = True

    def _round_ended(self, seqs: list[int], ok: bool) -> None:
        pending, acked = self._pending, self._acked
        for seq in seqs:
            if not ok:
                if seq in pending:
                    self.reject(seq)
            elif pending.get(seq) is _DISK_ONLY:  # the usual case, without done()'s calls
                del pending[seq]
                acked.append(seq)
            else:
                self.done(seq, DISK)
        self._request_flush()

    def has_output(self) -> bool:
        return bool(self._acked or self._nacked or self._held or self._held_old)

    def age_held(self) -> None:
        """A holding period is over: at the next drain, the acks held since before the
        previous call go out singly, those held since wait one more period."""
        self._release_old = bool(self._held or self._held_old)

    def drain(self, hold_above: bool = False) -> tuple[list[int], list[tuple[int, bool]]]:
        """Return (nacks, acks as (tag, multiple)) resolved since the last drain. With
        `hold_above`, acks above the smallest seq still pending or nacked stay for a later
        drain, when a multiple ack may cover them, but no longer than two periods of
        `age_held` (see Channel.send_confirms)."""
        self._flush_requested = False
        nacks, self._nacked = self._nacked, []
        acked, self._acked = self._acked, []
        held, old = self._held, self._held_old
        if not acked and not held and not old:
            return nacks, []
        # As RabbitMQ's coalesce_and_send: a multiple ack stops below anything not acked,
        # still pending or nacked in this same batch.
        pending_floor = self._floor()
        floor = self._next_seq if pending_floor is None else pending_floor
        if nacks:
            floor = min(floor, min(nacks))
        if not held and not old:  # the usual case: all of them below the floor, in one frame
            top = max(acked)
            if top < floor:
                self._sent_below = max(self._sent_below, floor)
                self.acks_drained += len(acked)
                return nacks, [(top, len(acked) > 1)]
        below, top = self._take_below(acked, floor)
        acks: list[tuple[int, bool]] = [(top, below > 1)] if below else []
        if not hold_above:
            singly = sorted(old | held)
            old.clear()
            held.clear()
        elif self._release_old:
            singly = sorted(old)
            self._held_old, self._held = held, set()
        else:
            singly = []
        self._release_old = False
        for seq in singly:
            acks.append((seq, False))
        self.acks_drained += below + len(singly)
        return nacks, acks

    def _take_below(self, acked: list[int], floor: int) -> tuple[int, int]:
        """Hold the newly `acked`, then take every held ack below `floor` out: (how many,
        the largest). One below the mark already (held late, after a drain passed it)
        is taken at once."""
        held, old, mark = self._held, self._held_old, self._sent_below
        below = top = 0
        for seq in acked:
            if seq < mark:
                below += 1
                top = max(top, seq)
            else:
                held.add(seq)
        seq = mark
        while seq < floor:
            if seq in held:
                held.remove(seq)
            elif seq in old:
                old.remove(seq)
            else:  # nacked, sent singly, or acked by an earlier multiple ack
                seq += 1
                continue
            below += 1
            top = seq
            seq += 1
        self._sent_below = max(mark, floor)
        return below, top

    def _floor(self) -> int | None:
        """The smallest seq still pending (None: none is)."""
        pending = self._pending
        if not pending:
            self._low = self._next_seq
            return None
        low, end = self._low, self._next_seq
        while low < end and low not in pending:
            low += 1
        if low == end:  # no pending seq above the mark: `hold` keeps that from happening
            low = min(pending)
        self._low = low
        return low

    def holds_acks(self) -> bool:
        """Acks held back by a `drain(hold_above=True)`, or resolved since: some to send."""
        return bool(self._held or self._held_old or self._acked)


class ConfirmTicket:
    """What an end-to-end queue keeps to settle a publish's confirm later: the publishing
    channel's ledger and the publish's seq there (a closed channel's ledger ignores it).

    A plain class, not a NamedTuple: one is made per publish, and compiled (mypyc) a
    native class is built without the interpreted __new__ a NamedTuple's takes. Read its
    fields by name, not by unpacking: compiled, `ticket.ledger.vouch(...)` is a direct
    call, an unpacked ledger a dynamic one (some 2,000 machine instructions a publish)."""

    __slots__ = ("ledger", "routing", "seq")

    def __init__(self, ledger: ConfirmLedger, seq: int, routing: bool = False) -> None:
        self.ledger = ledger
        self.seq = seq
        self.routing = routing  # the confirm waits for the routing too (publishing.py)
