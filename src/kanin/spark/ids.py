"""Message ids the sink gives rows: the same for every attempt of a task, so a
deduplicating exchange keeps one copy whatever Spark retries.

A task attempt that fails after publishing part of its rows is run again from its first
row; speculation may run two attempts at once; a streaming query restarted from its
checkpoint runs its last uncommitted batch again. Each re-publishes the same rows, and
only ids built from what all those attempts share let the broker drop the copies:
- a column the user names (idColumn): the best, it survives re-running a whole job;
- otherwise the row's place: its write (the streaming query's id and batch id, which
  Spark keeps in the checkpoint, or for a batch job a token made once when the job is
  planned), the task's partition and the row's index in it. That is deterministic as
  long as the partition's rows come in the same order each time (true of a kanin stream
  read; not after a shuffle without a sort), and a batch job that is run again from the
  start is a new write with new ids.
Never the attempt number, a random value per task or a time: those differ per attempt.
"""

from __future__ import annotations

from typing import Any

# Where a deduplicating exchange or queue looks for a message's id.
DEDUP_HEADER = "x-deduplication-header"


def streaming_write_id(query_id: str, batch_id: str) -> str:
    return f"q{query_id}:b{batch_id}"


def batch_write_id(job_token: str) -> str:
    return f"j{job_token}"


def row_message_id(write_id: str, partition: int, index: int) -> str:
    return f"{write_id}:p{partition}:r{index}"


def column_message_id(value: Any, column: str, index: int) -> str:
    """A message id from the idColumn's value (any type, as text); a row without one
    cannot be deduplicated, so it fails the task rather than go out unprotected."""
    if value is None:
        raise ValueError(f"row {index} of this task has no message id in column {column!r}")
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
