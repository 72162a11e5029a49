"""The free-disk check: below the limit, the disk alarm blocks publishers.

It polls shutil.disk_usage on the data directory, once a second while the disk is
low or close to the limit, and every few seconds otherwise. A poll alone lets a fast
publisher fill a small disk between two looks, so the store also calls `check` after
every commit round, the moment it has written (one statvfs syscall per round).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

from kanin.core.alarms import Alarms

log = logging.getLogger(__name__)


class DiskMonitor:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, path: Path, limit_bytes: int, alarms: Alarms
    ) -> None:
        self._loop = loop
        self._path = path
        self.limit_bytes = limit_bytes
        self._alarms = alarms
        self._timer: asyncio.TimerHandle | None = None
        self.free_bytes = 0

    def start(self) -> None:
        self._poll()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _poll(self) -> None:
        self.check()
        near = self.free_bytes < 2 * self.limit_bytes
        self._timer = self._loop.call_later(1.0 if near else 5.0, self._poll)

    def check(self) -> None:
        """Measure free space now, and raise or clear the alarm."""
        try:
            self.free_bytes = shutil.disk_usage(self._path).free
        except OSError as exc:
            log.error("cannot read free disk space of %s: %s", self._path, exc)
            self.free_bytes = 0
        self._alarms.set("disk", self.free_bytes < self.limit_bytes)
