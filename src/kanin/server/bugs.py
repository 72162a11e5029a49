"""Bugs asyncio catches in callbacks and tasks are logged as the connections log theirs
(kanin.core.bugs: one line each, a traceback the first time)."""

from __future__ import annotations

import asyncio
from typing import Any

from kanin.core.bugs import log_bug


def loop_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """For exceptions asyncio catches in callbacks and tasks (timers, dispatch)."""
    exc = context.get("exception")
    if isinstance(exc, BaseException):
        log_bug(f"in {context.get('message', 'a callback')}", exc)
    else:
        loop.default_exception_handler(context)
