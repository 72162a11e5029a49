"""`mypyc_attr`, for the classes kanin compiles with mypyc (see docs/mypyc.md), and
`build_name`, which says whether this kanin is the compiled build or pure Python.

mypyc reads the decorator from the type check (mypy_extensions.mypyc_attr); at run time
it is a no-op, so kanin needs mypy_extensions neither installed as Python nor compiled.
This module itself is never compiled.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*_names: Any, **_flags: Any) -> Callable[[T], T]:
        return lambda cls: cls


# A module every compiled build compiles: an extension module found for it means the
# installed kanin is the compiled one (it is, in practice, all or nothing: setup.py).
_COMPILED_PROBE = "kanin.core.channel"


def build_name() -> str:
    """ "compiled with mypyc" or "pure Python", for `kanin --version` and the startup log."""
    spec = importlib.util.find_spec(_COMPILED_PROBE)
    origin = spec.origin if spec is not None else None
    native = origin is not None and origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    return "compiled with mypyc" if native else "pure Python"
