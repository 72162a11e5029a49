"""Resource alarms (memory, disk): while any is raised, publishing connections are blocked.

As in RabbitMQ, an alarm is broker-wide; each connection that publishes gets
connection.blocked (with the first alarm's reason) and is no longer read until every
alarm has cleared. Consumers keep being served, so queues can drain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

REASONS = {"memory": "low on memory", "disk": "low on disk"}


class Alarms:
    def __init__(self) -> None:
        self._raised: dict[str, None] = {}  # insertion-ordered set
        self.on_change: Callable[[bool, str], None] | None = None

    @property
    def blocked(self) -> bool:
        return bool(self._raised)

    @property
    def raised(self) -> tuple[str, ...]:
        """The alarms in effect ("memory", "disk"), in the order they were raised."""
        return tuple(self._raised)

    @property
    def reason(self) -> str:
        return REASONS.get(next(iter(self._raised), ""), "")

    def set(self, name: str, raised: bool) -> None:
        was_blocked = self.blocked
        if raised and name not in self._raised:
            self._raised[name] = None
            log.warning("%s alarm raised: blocking publishers", name)
        elif not raised and name in self._raised:
            del self._raised[name]
            log.info("%s alarm cleared", name)
        if self.blocked != was_blocked and self.on_change is not None:
            self.on_change(self.blocked, self.reason)
