"""The slice of an event loop the core needs: run soon, run later, read the clock.

asyncio's loop satisfies it; tests may pass a fake that runs callbacks by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_soon(self, callback: Callable[..., Any], *args: Any) -> Any: ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Cancellable: ...

    def time(self) -> float: ...
