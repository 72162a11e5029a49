"""Fixtures the unit tests of the file store share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from store_harness import Harness


@pytest.fixture
async def files(tmp_path: Path) -> AsyncIterator[Harness]:
    """A file store under tmp_path, closed after the test."""
    opened = Harness.open("file", tmp_path / "store")
    try:
        yield opened
    finally:
        await opened.close()
