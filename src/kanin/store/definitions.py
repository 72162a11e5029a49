"""Durable definitions: vhosts, users, permissions, durable exchanges, durable queues
and the bindings between durable things, kept in one JSON document.

The document is small and changes rarely, so it is rewritten whole: written to a
temporary file, fsynced, renamed over the old one and the directory fsynced. A crash
leaves either the old or the new document, never a mix. Saves are coalesced to one
per event-loop turn, and always land before any publisher confirm of that turn could
go out (confirms wait for the message store's commit round, which runs later).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1


def save(path: Path, document: dict[str, Any]) -> None:
    document = {"kanin_definitions_version": FORMAT_VERSION, **document}
    data = json.dumps(document, indent=1, sort_keys=True, default=_encode).encode()
    temporary = path.with_suffix(".tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def load(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    document: dict[str, Any] = json.loads(path.read_bytes(), object_hook=_decode)
    version = document.get("kanin_definitions_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported definitions version {version!r}")
    return document


# Field-table values JSON cannot hold as they are (bytes, timestamps), tagged.
def _encode(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {"__bytes__": value.hex()}
    if hasattr(value, "isoformat"):
        return {"__datetime__": value.isoformat()}
    raise TypeError(f"cannot persist {type(value).__name__} in definitions")


def _decode(value: dict[str, Any]) -> Any:
    if set(value) == {"__bytes__"}:
        return bytes.fromhex(value["__bytes__"])
    if set(value) == {"__datetime__"}:
        import datetime

        return datetime.datetime.fromisoformat(value["__datetime__"])
    return value
