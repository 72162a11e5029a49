"""The confirm ledger of one channel in confirm mode: publish seq -> outcome.

Rules (https://www.rabbitmq.com/confirms.html, modelled on RabbitMQ's rabbit_confirms and
coalesce_and_send):
- Sequence numbers start at 1 and grow by 1 per basic.publish on the channel.
- Every seq is confirmed exactly once, by ack or nack.
- A publish is *pending* while some queue still has to accept it (disk, consumer);
  `confirm`/`reject` resolve it. Immediately-resolved publishes never enter pending.
- `drain` turns everything resolved since the last drain into frames to send:
  nacks one by one first, then acks, coalesced: all acked seqs below the smallest
  seq still pending or nacked go out as one ack with multiple=true, the rest singly.
"""

from __future__ import annotations


class ConfirmLedger:
    def __init__(self) -> None:
        self._next_seq = 1
        self._pending: set[int] = set()
        self._acked: list[int] = []
        self._nacked: list[int] = []

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def next_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def hold(self, seq: int) -> None:
        """The publish `seq` waits for something before it can be confirmed."""
        self._pending.add(seq)

    def confirm(self, seq: int) -> None:
        self._pending.discard(seq)
        self._acked.append(seq)

    def reject(self, seq: int) -> None:
        self._pending.discard(seq)
        self._nacked.append(seq)

    def has_output(self) -> bool:
        return bool(self._acked or self._nacked)

    def drain(self) -> tuple[list[int], list[tuple[int, bool]]]:
        """Return (nacks, acks as (tag, multiple)) resolved since the last drain."""
        nacks, self._nacked = self._nacked, []
        acked, self._acked = self._acked, []
        if not acked:
            return nacks, []
        acked.sort()
        # As RabbitMQ's coalesce_and_send: a multiple ack stops below anything not acked,
        # still pending or nacked in this same batch.
        unacked = [*self._pending, *nacks]
        floor = min(unacked) if unacked else None
        below = acked if floor is None else [s for s in acked if s < floor]
        above = [] if floor is None else [s for s in acked if s > floor]
        acks: list[tuple[int, bool]] = []
        if below:
            acks.append((below[-1], len(below) > 1))
        acks.extend((seq, False) for seq in above)
        return nacks, acks
