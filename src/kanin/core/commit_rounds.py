"""Waiting on the store's commit rounds: many items, one store callback per round.

Whatever must hear that a stored message is durable (a publisher's confirm) or that
writing it failed (a queue dropping what a failed round held) keeps the item in a
RoundBatches, which groups items by the commit round that was pending when they were
added (`MessageStore.pending_round`: the publish's ticket) and asks the store for one
`after_commit` callback per round, however many items wait on it.

Why one callback per round is safe: the store promises that an `after_commit` waiter
registered after a record hears True only once that record is durable, and False if
the round holding it (or an earlier one still running) failed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from kanin.store.api import CommitRounds

T = TypeVar("T")


class RoundBatches(Generic[T]):
    __slots__ = ("_batches", "_closed", "_on_round_end", "_store")

    def __init__(self, store: CommitRounds, on_round_end: Callable[[list[T], bool], None]) -> None:
        self._store = store
        self._on_round_end = on_round_end  # (the items of a round, did it succeed)
        self._batches: dict[int, list[T]] = {}
        self._closed = False

    def add(self, item: T) -> None:
        """`item` waits for the round that what is recorded now goes to."""
        round_number = self._store.pending_round()
        batch = self._batches.get(round_number)
        if batch is None:
            batch = self._batches[round_number] = []
            self._store.after_commit(partial(self._ended, round_number))
        batch.append(item)

    def __len__(self) -> int:
        return sum(len(batch) for batch in self._batches.values())

    def close(self) -> None:
        """The owner is gone: forget every item; rounds that end later are ignored."""
        self._closed = True
        self._batches.clear()

    def _ended(self, round_number: int, ok: bool) -> None:
        batch = self._batches.pop(round_number, None)
        if batch and not self._closed:
            self._on_round_end(batch, ok)
