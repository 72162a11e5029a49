"""One broker per data directory: an exclusive flock on `kanin.lock`, held for life.

Two brokers on one directory would both append to the same segment files and rewrite
the same definitions, and confirmed messages would be lost. The lock is taken before
anything in the directory is read or written. The kernel releases a flock when its
holder exits, however it exits (kill -9 included), so a stale lock file never blocks a
restart; the file is left in place (deleting it would race with a starting broker) and
holds the holder's PID and start time, for the error message of the next one.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from kanin.errors import StartupError

LOCK_FILE = "kanin.lock"


class DataDirLock:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise StartupError naming the directory and the holder."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StartupError(
                f"data directory {self.path.parent} is in use by another kanin ({holder})"
            ) from None
        except OSError:
            os.close(fd)
            raise
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, started {stamp}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None
