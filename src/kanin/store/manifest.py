"""Which segment files the message log must hold: a small file beside them.

How this works:
- Segment files are numbered in the order they are created, and the store deletes them
  only oldest first (a REMOVE must outlive the ENQUEUE it cancels), so the numbers the
  store itself has deleted are always those below some number. The manifest keeps that
  number (`floor`), the newest number the log has created (`top`), and the numbers in
  between that never got a file (`gaps`: every write to that segment failed before its
  file was created, or the loss of its file was accepted with --force-recovery).
  Every number from floor to top that is not a gap must have a file: a missing one was
  lost outside the store, and recovery refuses to start without --force-recovery.
- Crash safety: `floor` is raised and saved before a file is deleted, `top` after a new
  file is created (and its directory entry synced), so the manifest never names a file
  the store did not make, nor misses one the store deleted: a crash between the two
  steps leaves a file below floor or above top, which is fine.
- Saving writes a temporary file, fsyncs it, renames it over the old one and fsyncs the
  directory: a reader sees the old manifest or the new one, whole.
- A log written before the manifest existed has none: recovery then checks only for
  gaps between the files there are, and writes the manifest.
This module does its own I/O (not through kanin.store.segments) so that the faulty-disk
tests, which fail the segment files' writes, do not fail it by accident.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from kanin.store.errors import RecoveryError

NAME = "segments.json"


@dataclass
class Manifest:
    floor: int = 1  # every segment below this number may have been deleted by the store
    top: int = 0  # the newest segment number created, 0 if none
    gaps: set[int] = field(default_factory=set)  # numbers in floor..top with no file, rightly

    def expected(self) -> set[int]:
        """The segment numbers whose files must exist."""
        return set(range(self.floor, self.top + 1)) - self.gaps

    def raise_floor(self, floor: int) -> None:
        self.floor = max(self.floor, floor)
        self.gaps = {n for n in self.gaps if n >= self.floor}

    def copy(self) -> Manifest:
        return Manifest(self.floor, self.top, set(self.gaps))


def path_in(directory: Path) -> Path:
    return directory / NAME


def load(directory: Path) -> Manifest | None:
    """The saved manifest, None if there is none; RecoveryError if it cannot be read."""
    path = path_in(directory)
    try:
        document = json.loads(path.read_bytes())
        return Manifest(int(document["floor"]), int(document["top"]), set(document["gaps"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RecoveryError(f"cannot read the segment manifest {path}: {exc}") from exc


def save(directory: Path, manifest: Manifest) -> None:
    """Replace the saved manifest atomically and durably. Raises OSError."""
    path = path_in(directory)
    temporary = path.with_name(NAME + ".tmp")
    document = {"floor": manifest.floor, "top": manifest.top, "gaps": sorted(manifest.gaps)}
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(json.dumps(document).encode() + b"\n")
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
