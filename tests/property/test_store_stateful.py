"""A stateful property test of the FileStore on a faulty disk (after rabbitmq-server's
classic_queue_prop_SUITE): random appends, removes, deliveries, commit rounds, clean restarts,
kill -9 restarts that tear the pending batch, disk errors, and reading messages back (as a
deep queue does), checked against a model.

The model tracks each record's fate as PENDING (appended, no round has covered it yet),
CONFIRMED (a round that covered it reported ok) or UNCERTAIN (its round failed or was torn by
a crash: it may or may not be on disk). After every restart:
- a message whose ENQUEUE is confirmed and that was never removed is there, exactly;
- a message whose REMOVE is confirmed is not there;
- anything else may or may not be there, but never in another queue or with other content;
- no id twice, each queue in id order, redelivered exactly when known to be.
Whatever a restart shows becomes the model's truth: present means durable from then on.
And at any moment, a running store reads back every message it still holds exactly as given,
wherever it is: waiting for its round, on disk, moved by compaction, or never written because
its round failed.
"""

from __future__ import annotations

import asyncio
import enum
import errno
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
)

from kanin.store.file_store import FileStore
from kanin.store.records import queue_key
from kanin.testing.faulty_disk import FaultySegmentLog, faulty_file_store
from store_harness import StoredMessage, contents_of

T = TypeVar("T")
QUEUES = [queue_key("/", "a"), queue_key("/", "b"), queue_key("v2", "a")]
SEGMENT_BYTES = 1024  # small, so rotation and whole-segment deletion happen within a run


# Mostly small bodies, some a good part of a segment, so batches span segment files.
BODIES = st.one_of(
    st.binary(max_size=30),
    st.binary(max_size=30),
    st.tuples(st.integers(100, 400), st.binary(min_size=1, max_size=8)).map(
        lambda t: (t[1] * t[0])[: t[0]]
    ),
)


class InlineExecutor(ThreadPoolExecutor):
    """Runs each job at once, on the caller's thread."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


class Status(enum.Enum):
    PENDING = "pending"
    CONFIRMED = "confirmed"
    UNCERTAIN = "uncertain"


@dataclass
class Tracked:
    queue: str
    exchange: str
    routing_key: str
    header: bytes
    body: bytes
    enqueue: Status
    remove: Status | None = None
    delivered: Status | None = None

    def settle(self, ok: bool) -> None:
        """A commit round ended: everything pending is now confirmed, or uncertain."""
        outcome = Status.CONFIRMED if ok else Status.UNCERTAIN
        if self.enqueue is Status.PENDING:
            self.enqueue = outcome
        if self.remove is Status.PENDING:
            self.remove = outcome
        if self.delivered is Status.PENDING:
            self.delivered = outcome

    @property
    def must_exist(self) -> bool:
        return self.enqueue is Status.CONFIRMED and self.remove is None

    @property
    def must_not_exist(self) -> bool:
        return self.remove is Status.CONFIRMED


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        # Compaction reads segments in the default executor; run them inline, so their
        # results arrive at the same point of every run (Hypothesis needs determinism).
        self.loop.set_default_executor(InlineExecutor())
        self.directory = Path(tempfile.mkdtemp(prefix="kanin-store-prop-"))
        self.store: FileStore | None = None
        self.log: FaultySegmentLog | None = None
        self.model: dict[int, Tracked] = {}
        self.last_id = 0
        self.restarts = 0

    # -- plumbing ------------------------------------------------------------------------------

    def open_store(self) -> dict[str, list[StoredMessage]]:
        self.store, self.log = faulty_file_store(
            self.directory, self.loop, segment_bytes=SEGMENT_BYTES
        )
        return contents_of(self.store, self.store.recover())

    @property
    def live_in_store(self) -> list[int]:
        """Ids the running store holds: enqueued or recovered, not removed since."""
        return sorted(i for i, t in self.model.items() if t.remove is None)

    def run_commit(self) -> bool:
        assert self.store is not None
        # Registered before the loop runs, so the waiter joins the round that takes the
        # pending appends (test_store_contract covers a waiter that comes a turn late).
        done: asyncio.Future[bool] = self.loop.create_future()
        self.store.after_commit(done.set_result)
        ok = self.loop.run_until_complete(asyncio.wait_for(done, 10))
        for tracked in self.model.values():
            tracked.settle(ok)
        # Rounds that compaction started meanwhile finish too, so that no write is in flight
        # between steps and every run of an example does the same thing.
        committer = self.store.committer
        for _ in range(1000):
            if committer.idle:
                break
            self.loop.run_until_complete(asyncio.sleep(0.001))
        assert committer.idle, "the committer never went idle"
        return ok

    def check_recovered(self, recovered: dict[str, list[StoredMessage]]) -> None:
        seen: dict[int, StoredMessage] = {}
        for queue, messages in recovered.items():
            ids = [m.id for m in messages]
            assert ids == sorted(set(ids)), f"{queue!r} not in id order: {ids}"
            for message in messages:
                assert message.id not in seen, f"id {message.id} recovered twice"
                seen[message.id] = message
                tracked = self.model.get(message.id)
                assert tracked is not None, f"id {message.id} came back from nowhere"
                assert queue == tracked.queue, f"id {message.id} in {queue!r}"
                assert (message.exchange, message.routing_key) == (
                    tracked.exchange,
                    tracked.routing_key,
                ), message.id
                assert message.header == tracked.header, message.id
                assert message.body == tracked.body, message.id
                assert not tracked.must_not_exist, f"id {message.id}: its REMOVE was committed"
                if tracked.delivered is Status.CONFIRMED:
                    assert message.redelivered, f"id {message.id} lost its redelivered flag"
                if tracked.delivered is None:
                    assert not message.redelivered, f"id {message.id} was never delivered"
        lost = sorted(i for i, t in self.model.items() if t.must_exist and i not in seen)
        assert not lost, f"confirmed messages lost: {lost}"
        # What came back is the truth from now on; what did not is gone.
        for message_id in list(self.model):
            found = seen.get(message_id)
            if found is None:
                del self.model[message_id]
                continue
            tracked = self.model[message_id]
            tracked.enqueue, tracked.remove = Status.CONFIRMED, None
            tracked.delivered = Status.CONFIRMED if found.redelivered else None

    # -- rules ---------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        assert self.open_store() == {}

    @rule(
        messages=st.lists(
            st.tuples(
                st.sampled_from(QUEUES),
                st.sampled_from(["", "amq.direct", "ex.\u00e9"]),
                st.text(max_size=10),
                st.binary(max_size=40),
                BODIES,
            ),
            min_size=1,
            max_size=6,
        )
    )
    def append(self, messages: list[tuple[str, str, str, bytes, bytes]]) -> None:
        for queue, exchange, routing_key, header, body in messages:
            self.append_one(queue, exchange, routing_key, header, body)

    def append_one(
        self, queue: str, exchange: str, routing_key: str, header: bytes, body: bytes
    ) -> None:
        assert self.store is not None
        message_id = self.store.enqueue(queue, exchange, routing_key, header, body)
        # Ids grow, and never reuse one that may still be on disk. (That no id is ever reused,
        # even one gone from disk, is test_store_contract's test_ids_are_not_reused_...)
        assert message_id > max([self.last_id, *self.model]), message_id
        self.last_id = message_id
        self.model[message_id] = Tracked(
            queue, exchange, routing_key, header, body, enqueue=Status.PENDING
        )

    @precondition(lambda self: bool(self.live_in_store))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        """Remove a few messages (acks), often enough to empty or thin out a segment."""
        assert self.store is not None
        chosen = data.draw(
            st.lists(st.sampled_from(self.live_in_store), min_size=1, max_size=8, unique=True),
            label="remove",
        )
        self.remove_ids(chosen)

    def remove_ids(self, chosen: list[int]) -> None:
        assert self.store is not None
        for message_id in chosen:
            tracked = self.model[message_id]
            self.store.remove(tracked.queue, message_id)
            tracked.remove = Status.PENDING

    @precondition(lambda self: len(self.live_in_store) >= 5)
    @rule(keep_every=st.integers(4, 9))
    def thin_out(self, keep_every: int) -> None:
        """Remove all but every n-th live message: old segments keep a few live messages
        among many removed ones, which is what compaction is for."""
        assert self.store is not None
        for index, message_id in enumerate(self.live_in_store):
            if index % keep_every:
                tracked = self.model[message_id]
                self.store.remove(tracked.queue, message_id)
                tracked.remove = Status.PENDING

    @precondition(lambda self: bool(self.live_in_store))
    @rule(data=st.data())
    def delivered(self, data: st.DataObject) -> None:
        assert self.store is not None
        chosen = data.draw(
            st.lists(st.sampled_from(self.live_in_store), min_size=1, max_size=4, unique=True),
            label="deliver",
        )
        self.deliver_ids(chosen)

    def deliver_ids(self, chosen: list[int]) -> None:
        assert self.store is not None
        for message_id in chosen:
            tracked = self.model[message_id]
            self.store.delivered(tracked.queue, message_id)
            if tracked.delivered is not Status.CONFIRMED:
                tracked.delivered = Status.PENDING

    @precondition(lambda self: bool(self.live_in_store))
    @rule(data=st.data())
    def read_back(self, data: st.DataObject) -> None:
        """What a deep queue does: read messages it holds back by id, exactly as given."""
        assert self.store is not None
        chosen = data.draw(
            st.lists(st.sampled_from(self.live_in_store), min_size=1, max_size=10, unique=True),
            label="read",
        )
        self.read_ids(chosen)

    def read_ids(self, chosen: list[int]) -> None:
        assert self.store is not None
        for queue in QUEUES:
            ids = [i for i in chosen if self.model[i].queue == queue]
            ahead = [i for i in self.live_in_store if i not in ids][:8]  # only a hint
            for message_id, content in zip(ids, self.store.read(queue, ids, ahead), strict=True):
                tracked = self.model[message_id]
                assert content is not None, f"id {message_id} cannot be read back"
                assert (content.exchange, content.routing_key) == (
                    tracked.exchange,
                    tracked.routing_key,
                ), message_id
                assert (content.header, content.body) == (tracked.header, tracked.body), message_id

    @property
    def broken(self) -> bool:
        """The log refuses writes since a failed one could not be undone (until restart)."""
        return self.log is not None and self.log.broken

    def settle(self) -> None:
        """Commit, and let background compaction finish and commit too."""
        assert self.store is not None
        store = self.store
        for _ in range(100):
            ok = self.run_commit()
            assert ok or self.broken, "a round failed with no fault injected"
            # Compaction reads segments off the loop, then writes through the committer.
            reading = any(state.compacting for state in store._live.values())
            if store.committer.idle and not reading:
                return
            self.loop.run_until_complete(asyncio.sleep(0.002))
        raise AssertionError("the store never settled")

    @rule()
    def commit(self) -> None:
        ok = self.run_commit()
        assert ok or self.broken, "a round failed with no fault injected"

    @rule(
        error=st.sampled_from([errno.ENOSPC, errno.EIO]),
        written=st.sampled_from(["nothing", "all", "part", "part, and the undo fails"]),
        fraction=st.floats(0.0, 1.0),
        body=BODIES,
    )
    def failed_commit(self, error: int, written: str, fraction: float, body: bytes) -> None:
        """A round fails having written nothing, all of its batch (then fsync fails), or a
        part of it (the log undoes that, unless the undo fails too and the log is broken).
        One more message makes sure the round has something to write."""
        assert self.log is not None
        self.settle()  # so the fault strikes this rule's round, not a compaction's
        self.append_one(QUEUES[0], "", "failing", b"", body)
        if written == "nothing":
            self.log.fail_next_write(error, 0)
        elif written == "all":
            self.log.fail_next_write(error, None)
        else:
            undo_fails = written != "part"
            self.log.fail_next_write(error, fraction=fraction, undo_fails=undo_fails)
        assert not self.run_commit()

    @rule(crash=st.booleans(), fraction=st.floats(0.0, 1.0))
    def restart(self, crash: bool, fraction: float) -> None:
        """A clean restart (commit, let compaction finish, close), or kill -9 during the next
        write, when only a `fraction` of the pending batch lands."""
        assert self.store is not None and self.log is not None
        if crash:
            self.log.crash_next_write(fraction=fraction)
            self.run_commit()  # fails if there was anything to write; nothing is confirmed
            self.store.committer.close()  # the process is gone: no drain, no more writes
        else:
            self.settle()
            self.loop.run_until_complete(self.store.close())
        self.restarts += 1
        self.last_id = 0
        self.check_recovered(self.open_store())

    def teardown(self) -> None:
        try:
            if self.store is not None:
                self.store.committer.close()
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()
            shutil.rmtree(self.directory, ignore_errors=True)


TestFileStoreModel = StoreMachine.TestCase
TestFileStoreModel.settings = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_message_moved_by_compaction_keeps_the_segment_it_moved_to() -> None:
    """Found by the machine above. Compaction copies a delivered message into the active
    segment, then its delivery mark; when that mark no longer fits, the segment closes.
    The copy must already count as live there, or the closed segment is deleted as empty
    and the message with it (it could not be read back, and was gone after a restart)."""
    machine = StoreMachine()
    queue = QUEUES[0]
    try:
        machine.start()
        machine.append_one(queue, "", "", b"", b"x" * 100)  # id 1: stays, delivered
        machine.deliver_ids([1])
        for _ in range(5):  # the rest of segment 1, and the start of segment 2
            machine.append_one(queue, "", "", b"", b"f" * 150)
        machine.append_one(queue, "", "", b"", b"g" * 300)
        machine.commit()
        # Segment 1 keeps only id 1 (so it is compacted); nothing in segment 2 is live.
        machine.remove_ids([i for i in machine.live_in_store if i != 1])
        # Fill segment 2 until id 1's copy fits in it but its delivery mark does not.
        machine.append_one(queue, "", "", b"", b"p" * 140)
        machine.remove_ids([machine.last_id])
        machine.settle()
        assert machine.store is not None and machine.store.compactions == 1
        machine.read_ids([1])
        machine.restart(crash=False, fraction=0.0)
        assert [*machine.model] == [1]
    finally:
        machine.teardown()
