"""`mypyc_attr`, for the classes kanin compiles with mypyc (see docs/mypyc.md).

mypyc reads the decorator from the type check (mypy_extensions.mypyc_attr); at run time
it is a no-op, so kanin needs mypy_extensions neither installed as Python nor compiled.
This module itself is never compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*_names: Any, **_flags: Any) -> Callable[[T], T]:
        return lambda cls: cls
