"""LongLong, in a module of its own so it stays a Python class.

An int subclass cannot be a native class when tables.py is compiled with mypyc (see
docs/mypyc.md), and this module is never compiled; tables.py re-exports it.
"""

from __future__ import annotations


class LongLong(int):
    """An int that goes on the wire as a signed 64-bit field ('l')."""
