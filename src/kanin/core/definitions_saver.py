"""Getting durable definitions onto the disk, and telling who waits for them.

How this works:
- Every durable definition change calls `changed()`, which bumps a version number and
  makes sure a message-store commit round will run. The save rides in that round, as
  its prelude (store/committer.py): on the committer's worker thread, before the
  round's records are written. So the changes of a loop turn, or of however many turns
  one fsync lasts, become one save off the loop, and 10,000 pipelined declares cost a
  few saves rather than 10,000.
- A round that starts while the definitions are behind memory saves them first, and
  fails as a whole if that save fails: its publishes are nacked. That is what keeps a
  confirmed message from sitting in the log of a queue whose definition never reached
  the disk (recovery would not know the queue). Waiting instead would hold every
  publisher's confirms for as long as the disk stays full; a nack tells them now.
- Whoever must not answer before a change is durable (a declare-ok, bind-ok, ...)
  calls `when_saved(callback)`: callback(None) once the definitions as they are now
  are on disk, callback(problem) if the save meant to carry them failed. The change
  stays in memory either way and is saved by a later round: after a failure, a round
  is retried every RETRY_S seconds until a save lands, so memory and disk converge.
- A failing save is logged at error level once per outage, and once when it recovers.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kanin.core.scheduling import Cancellable, Scheduler
from kanin.store import definitions
from kanin.store.committer import Prelude

log = logging.getLogger(__name__)

RETRY_S = 1.0
# callback(None): saved; callback(problem): the save failed, problem says why.
SaveWaiter = Callable[[str | None], None]


class DefinitionsSaver:
    def __init__(
        self,
        path: Path,
        snapshot: Callable[[], dict[str, Any]],
        scheduler: Scheduler,
        after_commit: Callable[[Callable[[bool], None]], None],
    ) -> None:
        self.path = path
        self._snapshot = snapshot
        self._scheduler = scheduler
        self._after_commit = after_commit
        self._version = 0  # bumped by every change
        self._saved = 0  # the version the file on disk holds
        self._waiters: deque[tuple[int, SaveWaiter]] = deque()
        self._round_requested = False
        self._retry: Cancellable | None = None
        self.failing = False  # the last save failed and none has landed since

    @property
    def unsaved(self) -> bool:
        return self._version != self._saved

    def changed(self) -> None:
        self._version += 1
        self._request_round()

    def when_saved(self, callback: SaveWaiter) -> bool:
        """False if the file is up to date (callback is not called); else callback is
        called once, later, with the outcome of the save that carries today's changes."""
        if not self.unsaved:
            return False
        self._waiters.append((self._version, callback))
        return True

    def prelude(self) -> Prelude | None:
        """The committer asks this at the start of every round."""
        if not self.unsaved:
            return None
        document = self._snapshot()  # on the loop: nothing changes under it
        return Prelude(
            run=functools.partial(definitions.save, self.path, document),
            done=functools.partial(self._attempted, self._version),
        )

    def save_now(self) -> None:
        """Save on the spot (an orderly stop, after the store has drained)."""
        definitions.save(self.path, self._snapshot())
        self._attempted(self._version, None)

    # -- rounds ---------------------------------------------------------------------------

    def _request_round(self) -> None:
        if not self._round_requested:
            self._round_requested = True
            self._after_commit(self._round_ended)

    def _round_ended(self, ok: bool) -> None:
        self._round_requested = False
        if not self.unsaved:
            return
        if ok:
            self._request_round()  # changed while the round ran
        elif self._retry is None:
            self._retry = self._scheduler.call_later(RETRY_S, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        if self.unsaved:
            self._request_round()

    def _attempted(self, version: int, error: BaseException | None) -> None:
        problem = None
        if error is None:
            self._saved = max(self._saved, version)
            if self.failing:
                log.warning("definitions saved to %s again", self.path)
            self.failing = False
        else:
            problem = f"cannot save definitions: {error}"
            if not self.failing:
                log.error(
                    "%s; until a save lands, definition changes are answered with a "
                    "connection error and persistent publishes with a nack; retrying every "
                    "%.0fs",
                    problem,
                    RETRY_S,
                )
            self.failing = True
        waiters = self._waiters
        while waiters and waiters[0][0] <= version:
            waiters.popleft()[1](problem)
