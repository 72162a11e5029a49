"""Where stream queues keep their logs: one directory per stream under data_dir/streams.

How this works:
- A stream's directory is named by a hash of its vhost and name (any name is a safe
  file name that way); a `NAME` file in it says which stream it is, for people.
- `open` makes (or finds) it and recovers the log in it, at declare or at start-up.
- `remove`, when the queue is deleted: the directory is renamed out of the way at once
  (so a stream declared again under the same name starts empty, in a fresh directory),
  then the log is closed and its files deleted in the background. A start-up deletes
  what such a removal left behind if the broker stopped first.
- `close` (the orderly stop) makes everything appended durable and lets go of the files.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import shutil
from pathlib import Path

from kanin.store import api
from kanin.store.stream_log import StreamLog

log = logging.getLogger(__name__)

NAME = "NAME"
DELETED = ".deleted-"


def directory_name(vhost: str, queue: str) -> str:
    return hashlib.sha256(f"{vhost}\0{queue}".encode()).hexdigest()[:32]


class FileStreamLogs:
    def __init__(self, directory: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.directory = directory
        self._loop = loop
        self._open: dict[Path, StreamLog] = {}
        self._removing: set[asyncio.Task[None]] = set()
        directory.mkdir(parents=True, exist_ok=True)
        for leftover in directory.glob(f"*{DELETED}*"):
            shutil.rmtree(leftover, ignore_errors=True)

    def exists(self, vhost: str, queue: str) -> bool:
        return (self.directory / directory_name(vhost, queue) / NAME).exists()

    def open(self, vhost: str, queue: str, segment_bytes: int) -> StreamLog:
        path = self.directory / directory_name(vhost, queue)
        existing = self._open.get(path)
        if existing is not None:  # a restore after a failed start, say: one log per stream
            return existing
        path.mkdir(exist_ok=True)
        (path / NAME).write_text(f"vhost: {vhost}\nqueue: {queue}\n")
        stream = StreamLog(path, self._loop, max_segment_bytes=segment_bytes)
        stream.recover()
        self._open[path] = stream
        return stream

    def remove(self, log_of_stream: api.StreamLog) -> None:
        """The stream was deleted: its files go, in the background."""
        found = [path for path, open_log in self._open.items() if open_log is log_of_stream]
        if not found:
            return
        stream = self._open.pop(found[0])
        tomb = stream.directory.with_name(stream.directory.name + DELETED + secrets.token_hex(4))
        try:
            stream.directory.rename(tomb)
            stream.relocate(tomb)
        except OSError as exc:
            log.error("stream %s: cannot move its files aside: %s", stream.directory, exc)
        task = self._loop.create_task(self._delete(stream))
        self._removing.add(task)
        task.add_done_callback(self._removing.discard)

    @staticmethod
    async def _delete(stream: StreamLog) -> None:
        await stream.close()
        stream.delete()

    async def close(self) -> None:
        """The orderly stop: every log made durable and closed."""
        if self._removing:
            await asyncio.gather(*self._removing, return_exceptions=True)
        logs, self._open = list(self._open.values()), {}
        for stream in logs:
            await stream.close()
