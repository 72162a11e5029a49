"""ruff and mypy are part of the test command: a newcomer's green run means clean code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_is_clean() -> None:
    result = run_tool("ruff", "check", "src", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = run_tool("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
