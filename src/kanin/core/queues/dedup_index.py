"""x-message-deduplication on a queue: a message is not enqueued while one with the same
x-deduplication-header value is in the queue (ready, held back or unacked), as the
rabbitmq-message-deduplication plugin's queues do. Its id leaves the index when the
message leaves the queue (acked, dropped, expired, dead-lettered, purged).

The plugin nacks a publish it drops as a duplicate; kanin confirms it (once the queue's
copy is on disk, for a durable queue): a publisher that retransmits until confirmed would
otherwise retransmit for as long as the first copy waits in the queue.

After a restart the index is rebuilt from the recovered messages' headers, read once at
start-up (store.read): for a deep queue that is one pass over its messages on disk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kanin.amqp.frames import decode_properties
from kanin.core.dedup_cache import dedup_key

if TYPE_CHECKING:
    from kanin.core.message import Entry, Message
    from kanin.store.api import MessageStore

HEADER = "x-deduplication-header"


class DedupIndex:
    def __init__(self) -> None:
        self._entries: dict[bytes, Entry] = {}  # id -> the message holding it
        self._keys: dict[Entry, bytes] = {}  # and back

    def __len__(self) -> int:
        return len(self._keys)

    @staticmethod
    def key_of(message: Message) -> bytes | None:
        """The message's id, None if it has none (it is never a duplicate then)."""
        headers = message.headers
        return dedup_key(headers.get(HEADER)) if headers else None

    def holds(self, key: bytes) -> bool:
        return key in self._entries

    def holder(self, key: bytes) -> Entry | None:
        """The message in the queue holding this id, if any."""
        return self._entries.get(key)

    def joined(self, entry: Entry, key: bytes) -> None:
        self._entries[key] = entry
        self._keys[entry] = key

    def left(self, entry: Entry) -> None:
        key = self._keys.pop(entry, None)
        if key is not None and self._entries.get(key) is entry:
            del self._entries[key]

    def restore(self, store: MessageStore, queue_key: str, entries: list[Entry]) -> None:
        """Start-up: the ids of recovered (paged-out) messages, from their stored headers."""
        contents = store.read(queue_key, [entry.stored_id for entry in entries])
        for entry, content in zip(entries, contents, strict=True):
            if content is None:
                continue
            headers = decode_properties(content.header).headers
            key = dedup_key(headers.get(HEADER)) if headers else None
            if key is not None:
                self.joined(entry, key)
