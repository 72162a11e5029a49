"""MemoryStore: the message store contract (api.MessageStore) with nothing on disk.

How this works: each queue's live messages are held in a dict by id, in id order; `read`
hands back the content held, and `read_later` the same (looked up at the call) on the
next loop turn; `recover` what is still live (so a "restart" in the shared store test
suite is recover() on the same instance), and `after_commit` callbacks run on the next
loop turn with True, since nothing is written and nothing can fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kanin.store.api import Content, Reader, Recovered, Waiter


@dataclass
class _Held:
    content: Content
    priority: int
    expires_at_ms: int
    redelivered: bool = False
    returns: int = 0  # as Recovered.returns


@dataclass
class MemoryStore:
    """The same contract with nothing on disk: `recover` returns what is still live."""

    loop: asyncio.AbstractEventLoop
    _next_id: int = 1
    _queues: dict[str, dict[int, _Held]] = field(default_factory=dict)

    def enqueue(
        self,
        queue: str,
        exchange: str,
        routing_key: str,
        header: bytes,
        body: bytes,
        *,
        priority: int = 0,
        expires_at_ms: int = 0,
    ) -> int:
        message_id = self._next_id
        self._next_id += 1
        held = _Held(Content(exchange, routing_key, header, body), priority, expires_at_ms)
        self._queues.setdefault(queue, {})[message_id] = held
        return message_id

    def read(
        self, queue: str, message_ids: Sequence[int], ahead: Sequence[int] = ()
    ) -> list[Content | None]:
        messages = self._queues.get(queue, {})
        return [
            held.content if (held := messages.get(i)) is not None else None for i in message_ids
        ]

    def read_later(
        self, queue: str, message_ids: Sequence[int], ahead: Sequence[int], done: Reader
    ) -> None:
        self.loop.call_soon(done, self.read(queue, message_ids, ahead))

    def remove(self, queue: str, message_id: int) -> None:
        self._queues.get(queue, {}).pop(message_id, None)

    def delivered(self, queue: str, message_id: int, returns: int = 0) -> None:
        held = self._queues.get(queue, {}).get(message_id)
        if held is not None:
            held.redelivered = True
            held.returns = returns + 1

    def after_commit(self, waiter: Waiter) -> None:
        self.loop.call_soon(waiter, True)

    def at_round_start(self, opener: Callable[[], None]) -> None:
        self.loop.call_soon(opener)

    def pending_round(self) -> int:
        return 0  # nothing is written, nothing fails

    def recover(self) -> dict[str, list[Recovered]]:
        return {
            queue: [
                Recovered(
                    i, len(h.content.body), h.priority, h.expires_at_ms, h.redelivered, h.returns
                )
                for i, h in sorted(messages.items())
            ]
            for queue, messages in self._queues.items()
            if messages
        }

    async def close(self) -> None:
        return None
