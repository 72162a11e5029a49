"""A session's states, in the order a connection goes through them."""

from __future__ import annotations

import enum


class State(enum.Enum):
    HEADER = 1  # waiting for the protocol header
    START_OK = 2
    TUNE_OK = 3
    OPEN_WAIT = 4  # tuned; waiting for connection.open
    OPEN = 5
    CLOSING = 6  # we sent connection.close; waiting (bounded) for close-ok
    CLOSED = 7
