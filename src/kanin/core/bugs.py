"""Logging unexpected exceptions (bugs) without letting a client flood the log.

An exception that is not an AMQPError is a bug, and may well be one a client can
trigger at will, once per frame. Each occurrence gets one short ERROR line (so the
rate stays visible); the full traceback is logged only the first time this process
sees that bug, told apart by exception type and the line that raised it: the
hundredth copy of a traceback says nothing the first did not, and a RecursionError's
runs to hundreds of kilobytes.
"""

from __future__ import annotations

import logging
import traceback

log = logging.getLogger("kanin.bugs")

_MAX_SIGNATURES = 1000  # distinct bugs remembered; beyond this, tracebacks stop
_MAX_TEXT = 200
_seen: set[tuple[str, str, int]] = set()


def log_bug(where: str, exc: BaseException) -> None:
    """One ERROR line for `exc`, plus its traceback the first time this bug is seen."""
    text = str(exc)
    if len(text) > _MAX_TEXT:
        text = text[:_MAX_TEXT] + "..."
    signature = _signature(exc)
    first = signature not in _seen and len(_seen) < _MAX_SIGNATURES
    if first:
        _seen.add(signature)
    log.error(
        "internal error %s: %s: %s",
        where,
        type(exc).__name__,
        text,
        exc_info=exc if first else None,
    )


def _signature(exc: BaseException) -> tuple[str, str, int]:
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    return (
        type(exc).__name__,
        last.filename if last else "",
        last.lineno or 0 if last else 0,
    )
