"""What the message store tests share (tests/unit/test_store_contract.py, test_store_file.py):
a Harness that opens, commits and "restarts" a MemoryStore or a FileStore (held as the
api.MessageStore interface: the contract suite uses nothing else), and helpers to say
what recover() must return.

recover() gives what a queue needs to rebuild itself (Recovered: id, body size, priority,
expiry, redelivered), never the content; `Harness.contents` reads the content back with
read() and checks that it agrees with what recover() said, so a test compares whole messages
(StoredMessage) and every restart also tests reading back.

Import it like helpers (tests/ is on sys.path): `from store_harness import Harness, expected`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from kanin.store import records
from kanin.store.api import Content, MessageStore, Recovered
from kanin.store.file_store import FileStore
from kanin.store.memory_store import MemoryStore
from kanin.store.records import queue_key
from kanin.testing.faulty_disk import FaultySegmentLog, faulty_file_store, segment_files

SEGMENT_BYTES = 4096  # small, so a few messages fill a segment
Q1 = queue_key("/", "orders")
Q2 = queue_key("/", "invoices")
Q3 = queue_key("other", "orders")  # same queue name, another vhost
HEADER = b"\x00\x3c\x00\x00\x00\x00\x00\x00\x00\x05\x90\x00\x02"  # a content header payload


@dataclass(frozen=True)
class StoredMessage:
    """A recovered message as a whole: what recover() said of it plus what read() gave."""

    id: int
    exchange: str
    routing_key: str
    header: bytes
    body: bytes
    redelivered: bool = False


@dataclass(frozen=True)
class Sent:
    """What was given to enqueue, to compare with what recover() returns."""

    id: int
    queue: str
    exchange: str
    routing_key: str
    header: bytes
    body: bytes

    def stored(self, redelivered: bool = False) -> StoredMessage:
        return StoredMessage(
            self.id, self.exchange, self.routing_key, self.header, self.body, redelivered
        )

    def encoded_size(self) -> int:
        record = records.Record(
            records.ENQUEUE,
            self.id,
            self.queue,
            self.exchange,
            self.routing_key,
            self.header,
            self.body,
        )
        return len(records.encode(record))


@dataclass
class Harness:
    """A store and how to restart it: close + a new FileStore on the same directory +
    recover() for "file", recover() on the same instance for "memory". With faulty=True the
    FileStore writes through a FaultySegmentLog (`log`), a fresh one after each restart."""

    kind: str
    directory: Path
    loop: asyncio.AbstractEventLoop
    store: MessageStore
    segment_bytes: int = SEGMENT_BYTES
    log: FaultySegmentLog | None = None

    @classmethod
    def open(
        cls, kind: str, directory: Path, segment_bytes: int = SEGMENT_BYTES, faulty: bool = False
    ) -> Harness:
        loop = asyncio.get_running_loop()
        store: MessageStore  # the contract suite sees the stores only through the interface
        log = None
        if kind == "memory":
            store = MemoryStore(loop)
        elif faulty:
            store, log = faulty_file_store(directory, loop, segment_bytes)
        else:
            store = FileStore(directory, loop, segment_bytes=segment_bytes, compact_settle_s=0)
        assert store.recover() == {}
        return cls(kind, directory, loop, store, segment_bytes, log)

    def reopen(self, faulty: bool | None = None) -> dict[str, list[StoredMessage]]:
        """A new FileStore on the directory, recovered (the old one must be closed or dead)."""
        return self.contents(self.reopen_recovered(faulty))

    def reopen_recovered(self, faulty: bool | None = None) -> dict[str, list[Recovered]]:
        """reopen(), returning recover()'s own answer."""
        if faulty is None:
            faulty = self.log is not None
        if faulty:
            self.store, self.log = faulty_file_store(self.directory, self.loop, self.segment_bytes)
        else:
            self.store = FileStore(
                self.directory, self.loop, segment_bytes=self.segment_bytes, compact_settle_s=0
            )
        return self.store.recover()

    def contents(self, recovered: dict[str, list[Recovered]]) -> dict[str, list[StoredMessage]]:
        """Recovered messages read back whole; each must be readable and of the size said."""
        return contents_of(self.store, recovered)

    @property
    def file(self) -> FileStore:
        assert isinstance(self.store, FileStore)
        return self.store

    def enqueue(
        self,
        queue: str,
        body: bytes,
        exchange: str = "amq.direct",
        routing_key: str = "rk",
        header: bytes = HEADER,
    ) -> Sent:
        message_id = self.store.enqueue(queue, exchange, routing_key, header, body)
        return Sent(message_id, queue, exchange, routing_key, header, body)

    async def commit(self) -> bool:
        """Wait for a commit round covering everything recorded so far; its outcome."""
        done: asyncio.Future[bool] = self.loop.create_future()
        self.store.after_commit(done.set_result)
        return await asyncio.wait_for(done, 10)

    async def read_later(
        self, queue: str, ids: list[int], ahead: list[int] | None = None
    ) -> list[Content | None]:
        """read_later's answer, checked to come on a later loop turn, never inline."""
        answered: asyncio.Future[list[Content | None]] = self.loop.create_future()
        self.store.read_later(queue, ids, ahead or [], answered.set_result)
        assert not answered.done(), "read_later answered inline"
        return await asyncio.wait_for(answered, 10)

    async def restart(self) -> dict[str, list[StoredMessage]]:
        return self.contents(await self.restart_recovered())

    async def restart_recovered(self) -> dict[str, list[Recovered]]:
        """restart(), returning recover()'s own answer."""
        if isinstance(self.store, MemoryStore):
            return self.store.recover()
        await self.store.close()
        return self.reopen_recovered()

    def crash(self) -> None:
        """Abandon the FileStore as kill -9 would: no drain, nothing more written."""
        self.file.committer.close()

    def durable_ids(self) -> set[int]:
        """Ids live in what is durable right now: the files on disk (or the memory store)."""
        if isinstance(self.store, MemoryStore):
            return {m.id for messages in self.store.recover().values() for m in messages}
        live: set[int] = set()
        for path in segment_files(self.directory):
            for _, record in records.scan(path.read_bytes()):
                if record.type == records.ENQUEUE:
                    live.add(record.id)
                elif record.type == records.REMOVE:
                    live.discard(record.id)
        return live

    async def close(self) -> None:
        await self.store.close()


def contents_of(
    store: MessageStore, recovered: dict[str, list[Recovered]]
) -> dict[str, list[StoredMessage]]:
    """recover()'s answer read back whole with read(), checked against what it said."""
    whole: dict[str, list[StoredMessage]] = {}
    for queue, messages in recovered.items():
        read = store.read(queue, [m.id for m in messages])
        for message, content in zip(messages, read, strict=True):
            assert content is not None, f"recovered id {message.id} cannot be read back"
            assert message.body_size == len(content.body), message
            whole.setdefault(queue, []).append(
                StoredMessage(
                    message.id,
                    content.exchange,
                    content.routing_key,
                    content.header,
                    content.body,
                    message.redelivered,
                )
            )
    return whole


def expected(sent: list[Sent], redelivered: Collection[int] = ()) -> dict[str, list[StoredMessage]]:
    """What recover() must return for these live messages: by queue, in id order."""
    by_queue: dict[str, list[StoredMessage]] = {}
    for message in sorted(sent, key=lambda m: m.id):
        by_queue.setdefault(message.queue, []).append(message.stored(message.id in redelivered))
    return by_queue


def body(i: int, size: int = 40) -> bytes:
    """A recognisable body of `size` bytes for message number i."""
    stamp = f"message-{i}:".encode()
    return (stamp * (size // len(stamp) + 1))[:size]


def segment_of(directory: Path) -> dict[int, int]:
    """Message id -> number of the newest segment file holding an ENQUEUE record for it."""
    where: dict[int, int] = {}
    for path in segment_files(directory):
        for _, record in records.scan(path.read_bytes()):
            if record.type == records.ENQUEUE:
                where[record.id] = int(path.stem)
    return where
