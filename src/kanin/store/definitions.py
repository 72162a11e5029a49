"""Durable definitions: vhosts, users, permissions, policies, durable exchanges, durable
queues and the bindings between durable things, kept in one JSON document.

The document is small and changes rarely, so it is rewritten whole: written to a
temporary file, fsynced, renamed over the old one and the directory fsynced. A crash
leaves either the old or the new document, never a mix. When to save is decided by
core/definitions_saver.py: once per message-store commit round, before its records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kanin.errors import StartupError

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
    """The document, or None when there is none; StartupError naming the file when it
    cannot be read or is not a definitions document kanin wrote."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StartupError(f"cannot read definitions file {path}: {exc.strerror}") from None
    try:
        document = json.loads(data, object_hook=_decode)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
        raise _damaged(path, f"not valid JSON ({exc})") from None
    problem = _shape_problem(document)
    if problem:
        raise _damaged(path, problem)
    assert isinstance(document, dict)
    return document


def _damaged(path: Path, problem: str) -> StartupError:
    return StartupError(
        f"definitions file {path} is damaged: {problem}; restore it from a backup, or move "
        "it away and start with --force-recovery (stored messages are then kept aside, not "
        "deleted; see README, Running the broker)"
    )


# What each list in the document holds: objects with at least these keys.
_REQUIRED: dict[str, set[str]] = {
    "users": {"name", "password_hash", "tags"},
    "permissions": {"user", "vhost", "configure", "write", "read"},
    "policies": {"vhost", "name", "pattern", "apply-to", "definition", "priority"},
    "exchanges": {"vhost", "name", "type", "auto_delete", "internal", "arguments"},
    "queues": {"vhost", "name", "auto_delete", "arguments"},
    "bindings": {
        "vhost",
        "source",
        "destination",
        "destination_type",
        "routing_key",
        "arguments",
    },
}


def _shape_problem(document: Any) -> str:
    """What makes the document unusable, or "" if its shape is right."""
    if not isinstance(document, dict):
        return "not a definitions document (the top level is not an object)"
    version = document.get("kanin_definitions_version")
    if version != FORMAT_VERSION:
        return f"unsupported definitions version {version!r} (this kanin reads {FORMAT_VERSION})"
    vhosts = document.get("vhosts", [])
    if not isinstance(vhosts, list) or not all(isinstance(v, str) for v in vhosts):
        return '"vhosts" is not a list of names'
    for section, keys in _REQUIRED.items():
        entries = document.get(section, [])
        if not isinstance(entries, list):
            return f'"{section}" is not a list'
        for index, entry in enumerate(entries):
            missing = keys - set(entry) if isinstance(entry, dict) else keys
            if missing:
                return f'entry {index} of "{section}" lacks {", ".join(sorted(missing))}'
    return ""


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
