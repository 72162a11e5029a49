"""Damage to a stopped broker's data directory, one kind per row: every intact confirmed
message comes back, or the broker refuses to start with one clear line; never a silent loss.

Each row publishes confirmed persistent messages to a durable queue of a real `kanin server`
(small segments, so the log spans several files), stops it, damages the data directory with
its damage function and starts it again. The damage function returns what it destroyed:
- `lost`: the bodies of the messages whose records it damaged; every other message must be
  recovered, in order, with its body intact;
- `refused`: a text the refusal must name (exit status 2, a `kanin: cannot start:` line on
  stderr, no traceback); the row then starts again with --force-recovery, which must
  recover every message not in `lost`;
- `evidence`: a damaged closed segment, whose damaged bytes must still be on disk after the
  recovery (the file is never cut or rewritten, and keeps a second name, .damaged);
- `set_aside`: a file the operator moves away before the forced start (a damaged
  definitions file is not read again);
- `redeclare`: the definitions were lost, so after the forced start the queue is unknown and
  its messages are kept aside; the operator declares the durable queue again and restarts,
  and every message comes back.
To add a row, write a function over the data directory and add it to DAMAGE.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pytest

from helpers import start_kanin
from kanin.store import records

pytestmark = pytest.mark.kanin_only

QUEUE = "matrix-q"
MESSAGES = 300
SEGMENT_MB = "0.03125"  # 32 KiB: the messages below fill about eight segments


def body_of(index: int) -> bytes:
    return b"%06d:" % index + bytes([65 + index % 26]) * (700 + index % 200)


@dataclass
class Damage:
    """What a damage function destroyed (see the module docstring)."""

    lost: set[bytes] = field(default_factory=set)
    refused: str | None = None
    evidence: Path | None = None
    set_aside: Path | None = None
    redeclare: bool = False

    def __post_init__(self) -> None:
        self.damaged_bytes = self.evidence.read_bytes() if self.evidence else b""


# -- the data directory ---------------------------------------------------------------------


def segments(data_dir: Path) -> list[Path]:
    return sorted(p for p in (data_dir / "messages").glob("*.log") if p.stem.isdigit())


def enqueues(path: Path) -> list[tuple[int, bytes]]:
    """(offset, body) of each message record in a segment file."""
    return [
        (offset, record.body)
        for offset, record in records.scan(path.read_bytes())
        if record.type == records.ENQUEUE
    ]


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# -- damage functions: data directory -> what was destroyed ----------------------------------


def flipped_byte_in_a_closed_segment(data_dir: Path) -> Damage:
    closed = segments(data_dir)[1]
    found = enqueues(closed)
    offset, body = found[len(found) // 2]
    flip(closed, offset + 60)
    return Damage(lost={body}, evidence=closed)


def flipped_byte_in_the_active_segment(data_dir: Path) -> Damage:
    active = segments(data_dir)[-1]
    found = enqueues(active)
    assert len(found) >= 3, "the active segment should hold several messages"
    offset, body = found[len(found) // 2]
    flip(active, offset + 60)
    return Damage(lost={body})


def truncated_active_segment(data_dir: Path) -> Damage:
    active = segments(data_dir)[-1]
    _, last = enqueues(active)[-1]
    os.truncate(active, active.stat().st_size - 10)  # a torn last write
    return Damage(lost={last})


def truncated_closed_segment(data_dir: Path) -> Damage:
    closed = segments(data_dir)[2]
    found = enqueues(closed)
    offset, _ = found[-3]
    os.truncate(closed, offset + 40)  # into the third-last record
    return Damage(lost={body for _, body in found[-3:]}, evidence=closed)


def damaged_closed_segment_header(data_dir: Path) -> Damage:
    closed = segments(data_dir)[1]
    flip(closed, 2)
    return Damage(evidence=closed)


def deleted_segment(data_dir: Path) -> Damage:
    gone = segments(data_dir)[3]
    lost = {body for _, body in enqueues(gone)}
    gone.unlink()
    return Damage(lost=lost, refused=gone.name)


def deleted_oldest_segment(data_dir: Path) -> Damage:
    gone = segments(data_dir)[0]
    lost = {body for _, body in enqueues(gone)}
    gone.unlink()
    return Damage(lost=lost, refused=gone.name)


def deleted_definitions_file(data_dir: Path) -> Damage:
    (data_dir / "definitions.json").unlink()
    return Damage(refused="definitions.json", redeclare=True)


def damaged_definitions_file(data_dir: Path) -> Damage:
    path = data_dir / "definitions.json"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # torn mid-document
    return Damage(refused="definitions.json", set_aside=path, redeclare=True)


DAMAGE: list[Callable[[Path], Damage]] = [
    flipped_byte_in_a_closed_segment,
    flipped_byte_in_the_active_segment,
    truncated_active_segment,
    truncated_closed_segment,
    damaged_closed_segment_header,
    deleted_segment,
    deleted_oldest_segment,
    deleted_definitions_file,
    damaged_definitions_file,
]


# -- the broker -------------------------------------------------------------------------------


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
    )


def publish_confirmed(port: int) -> list[bytes]:
    connection = connect(port)
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True)
    channel.confirm_delivery()  # basic_publish returns once the broker confirmed it
    bodies = [body_of(i) for i in range(MESSAGES)]
    for body in bodies:
        channel.basic_publish("", QUEUE, body, pika.BasicProperties(delivery_mode=2))
    connection.close()
    return bodies


def consume_all(port: int) -> list[bytes]:
    connection = connect(port)
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True, passive=True)
    got: list[bytes] = []
    while True:
        method, _properties, body = channel.basic_get(QUEUE, auto_ack=True)
        if method is None:
            break
        got.append(body)
    connection.close()
    return got


def declared_count(port: int) -> int:
    """Declare the durable queue (as the operator does to get kept-aside messages back) and
    return how many messages it holds now."""
    connection = connect(port)
    count = connection.channel().queue_declare(QUEUE, durable=True).method.message_count
    connection.close()
    return int(count)


def stop(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout=20) == 0


def start_refused(data_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kanin", "server", "--port", "0", "--bind", "127.0.0.1"]
    command += ["--mgmt-port", "0", "--prometheus-port", "0"]  # no HTTP listeners
    return subprocess.run(
        [*command, "--data-dir", str(data_dir), "--segment-mb", SEGMENT_MB],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__ for d in DAMAGE])
def test_damage_loses_nothing_intact_or_stops_start_up(
    tmp_path: Path, damage: Callable[[Path], Damage]
) -> None:
    data_dir = tmp_path / "data"
    process, port = start_kanin(data_dir, "--segment-mb", SEGMENT_MB)
    try:
        published = publish_confirmed(port)
    finally:
        stop(process)
    assert len(segments(data_dir)) >= 6, "the messages should span several segments"

    destroyed = damage(data_dir)
    assert destroyed.lost < set(published) or not destroyed.lost
    extra: tuple[str, ...] = ()
    if destroyed.refused is not None:
        result = start_refused(data_dir)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("kanin: cannot start: "), result.stderr
        assert destroyed.refused in last and "--force-recovery" in last, last
        extra = ("--force-recovery",)
    if destroyed.set_aside is not None:
        destroyed.set_aside.rename(tmp_path / "set-aside")

    process, port = start_kanin(data_dir, "--segment-mb", SEGMENT_MB, *extra)
    try:
        if destroyed.redeclare:
            assert declared_count(port) == 0  # kept aside, not in the new queue yet
    finally:
        stop(process)
    if destroyed.redeclare:  # the kept-aside messages were listed for the operator
        assert QUEUE in (data_dir / "unknown-queue-messages.json").read_text()
    # A plain start: the queue is known again (declared above), and its messages return.
    process, port = start_kanin(data_dir, "--segment-mb", SEGMENT_MB)
    try:
        recovered = consume_all(port)
    finally:
        stop(process)
    assert recovered == [body for body in published if body not in destroyed.lost]
    if destroyed.evidence is not None:
        kept = destroyed.evidence.with_name(destroyed.evidence.name + ".damaged")
        assert kept.read_bytes() == destroyed.damaged_bytes
