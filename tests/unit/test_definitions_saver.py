"""DefinitionsSaver on a real FileStore: saves ride the commit rounds, coalesced; a failed
save fails its round and is retried until one lands; waiters hear the outcome in order.

A save is made to fail by a directory where the save writes its temporary file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kanin.core import definitions_saver
from kanin.core.definitions_saver import DefinitionsSaver
from kanin.store.committer import Prelude
from kanin.store.file_store import FileStore

QUEUE = "/\x00q"


class Rig:
    """A store, a saver wired into its committer, and a document the test changes."""

    def __init__(self, directory: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.path = directory / "definitions.json"
        self.store = FileStore(directory / "messages", loop)
        self.store.recover()
        self.queues: list[str] = []
        self.saver = DefinitionsSaver(self.path, self.document, loop, self.store.after_commit)
        self.saves = 0
        self.store.committer.prelude = self.prelude

    def document(self) -> dict[str, Any]:
        return {"queues": [{"name": name} for name in self.queues]}

    def prelude(self) -> Prelude | None:
        prelude = self.saver.prelude()
        self.saves += prelude is not None
        return prelude

    def declare(self, name: str, outcomes: list[str | None]) -> None:
        self.queues.append(name)
        self.saver.changed()
        assert self.saver.when_saved(outcomes.append)

    def on_disk(self) -> list[str]:
        return [q["name"] for q in json.loads(self.path.read_text())["queues"]]


async def until(condition: Any) -> None:
    """Rounds run on a worker thread; the test's own timeout bounds the wait."""
    while not condition():
        await asyncio.sleep(0.005)


async def test_the_changes_of_one_turn_are_one_save(tmp_path: Path) -> None:
    rig = Rig(tmp_path, asyncio.get_running_loop())
    outcomes: list[str | None] = []
    for n in range(1000):
        rig.declare(f"q{n}", outcomes)
    await until(lambda: len(outcomes) == 1000)
    assert outcomes == [None] * 1000
    assert rig.saves == 1
    assert rig.on_disk() == [f"q{n}" for n in range(1000)]
    assert not rig.saver.unsaved
    assert not rig.saver.when_saved(outcomes.append)  # nothing to wait for now
    await rig.store.close()


async def test_a_failed_save_fails_its_round_and_is_retried_until_it_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(definitions_saver, "RETRY_S", 0.01)
    rig = Rig(tmp_path, asyncio.get_running_loop())
    blocker = tmp_path / "definitions.tmp"
    blocker.mkdir()
    outcomes: list[str | None] = []
    rounds: list[bool] = []
    rig.store.enqueue(QUEUE, "", "q", b"h", b"body")
    rig.declare("q", outcomes)
    rig.store.after_commit(rounds.append)  # a publisher's confirm waits on this round
    await until(lambda: outcomes and rounds)
    assert rounds == [False]  # nacked: its queue's definition is not on disk
    assert outcomes[0] is not None and "definitions.tmp" in outcomes[0]
    assert rig.saver.unsaved and rig.saver.failing
    await until(lambda: rig.saves >= 3)  # retried on its own, with nothing else to write
    blocker.rmdir()
    await until(lambda: not rig.saver.unsaved)
    assert rig.on_disk() == ["q"]
    assert not rig.saver.failing
    later: list[str | None] = []
    rig.declare("r", later)
    await until(lambda: later)
    assert later == [None]
    await rig.store.close()


async def test_waiters_hear_in_order_and_only_for_what_the_save_carried(tmp_path: Path) -> None:
    rig = Rig(tmp_path, asyncio.get_running_loop())
    heard: list[tuple[str, str | None]] = []
    rig.declare("a", [])
    rig.saver.when_saved(lambda problem: heard.append(("a", problem)))
    await until(lambda: heard)
    blocker = tmp_path / "definitions.tmp"
    blocker.mkdir()  # "b" will not be saved while this stands
    rig.declare("b", [])
    rig.saver.when_saved(lambda problem: heard.append(("b", problem)))
    await until(lambda: len(heard) == 2)
    assert heard[0] == ("a", None)
    assert heard[1][0] == "b" and heard[1][1] is not None
    assert rig.on_disk() == ["a"]
    blocker.rmdir()
    await rig.store.close()
