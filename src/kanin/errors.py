"""Errors that stop the broker from starting: what the operator must fix first.

The message of a StartupError is the one line `kanin server` prints (exit status 2):
it names the file, directory or option at fault and what is wrong with it.
"""

from __future__ import annotations


class StartupError(Exception):
    """Start-up cannot go on; the message says why, in one line."""
