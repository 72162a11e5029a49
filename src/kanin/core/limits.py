"""Queue length limits: x-max-length, x-max-length-bytes and x-overflow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kanin.core.queue import Queue

OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")


@dataclass(frozen=True)
class LengthLimits:
    max_length: int | None = None
    max_bytes: int | None = None
    overflow: str = "drop-head"

    @classmethod
    def from_arguments(cls, arguments: dict[str, Any]) -> LengthLimits:
        max_length = arguments.get("x-max-length")
        max_bytes = arguments.get("x-max-length-bytes")
        overflow = arguments.get("x-overflow", "drop-head")
        return cls(
            max_length if isinstance(max_length, int) else None,
            max_bytes if isinstance(max_bytes, int) else None,
            overflow if isinstance(overflow, str) else "drop-head",
        )

    @property
    def rejects_publish(self) -> bool:
        return self.overflow in ("reject-publish", "reject-publish-dlx")

    def full_for(self, queue: Queue, incoming_bytes: int) -> bool:
        """Would one more message of `incoming_bytes` break a limit?"""
        if self.max_length is not None and queue.message_count + 1 > self.max_length:
            return True
        return self.max_bytes is not None and queue.ready_bytes + incoming_bytes > self.max_bytes
