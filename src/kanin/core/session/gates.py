"""Replies held back until the definitions save they wait for has landed.

The -ok of a definition change says the change took effect, so it goes out only once
the definitions are on disk, and so does everything the connection sends after it: each
such -ok opens a gate, and what is sent while gates are shut is held in the newest one.
Gates open in order as their saves land. A failed save's gate never opens: what it holds
must not go out (the session closes the connection with 541 instead).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(eq=False)
class Gate:
    """Frames held until the definitions save this gate waits for has landed."""

    frames: list[bytes] = field(default_factory=list)
    done: bool = False
    problem: str | None = None  # why the save failed


class Gates:
    def __init__(self) -> None:
        self._gates: deque[Gate] = deque()  # oldest first
        self.held_bytes = 0  # bytes held in them
        # Whether any gate is shut: a plain attribute, as every send of the connection
        # reads it.
        self.shut = False

    def add(self, gate: Gate) -> None:
        """A gate that shuts now: what is sent from now on is held in it."""
        self._gates.append(gate)
        self.shut = True

    def hold(self, parts: list[bytes], size: int) -> None:
        self._gates[-1].frames.extend(parts)
        self.held_bytes += size

    def landed(self, gate: Gate, problem: str | None) -> tuple[list[bytes] | None, str | None]:
        """The save `gate` waited for has landed (`problem`: why it failed). Returns the
        frames free to go now, in order (None if no gate opened: an earlier one is still
        shut), and the problem of a failed gate reached on the way, if any: what it and
        the gates after it hold stays held."""
        gate.done, gate.problem = True, problem
        gates = self._gates
        if not gates or not gates[0].done:
            return None, None
        free: list[bytes] = []
        while gates and gates[0].done:
            first = gates.popleft()
            if first.problem is not None:
                self.shut = bool(gates)
                return free, first.problem
            self.held_bytes -= sum(map(len, first.frames))
            free.extend(first.frames)
        self.shut = bool(gates)
        return free, None

    def clear(self) -> None:
        """Held replies are dropped (the connection is closing or gone)."""
        self._gates.clear()
        self.held_bytes = 0
        self.shut = False
