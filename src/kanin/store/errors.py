"""Errors of the store that stop the broker from starting."""

from __future__ import annotations

from kanin.errors import StartupError


class RecoveryError(StartupError):
    """The data directory cannot be recovered without losing data the operator has not
    agreed to lose (`kanin server --force-recovery` agrees). The message is one line,
    printed as it is by the CLI."""
