"""ruff and mypy are part of the test command: a newcomer's green run means clean code."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
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


# References to documents that are not in the repository: a design spec's sections, the
# "seed" papers and experiments it started from, tracker issue numbers. A reader has none
# of them, so code and docs state the behaviour, or link RabbitMQ's public documentation.
# (Written with character classes, and the examples below with underscores, so that a
# plain grep of the repository for such citations finds nothing, this file included.)
OUTSIDE_REFERENCE = re.compile(r"\bS[P]EC\b|\b(?i:seed [0]\d\d|issue [0-9])")
TEXT_SUFFIXES = {".py", ".md", ".json", ".txt", ".toml", ".cfg", ".sh"}


def text_files() -> Iterator[Path]:
    yield ROOT / "README.md"
    for top in ("src", "tests", "bench"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path


def test_nothing_cites_documents_outside_the_repository() -> None:
    this_file = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in text_files()
        if path.resolve() != this_file
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE_REFERENCE.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_outside_reference_pattern_catches_what_it_is_for() -> None:
    written = ("see SP_EC §3", "seed _003's experiment", "Seed _001 reports", "(issue _5)")
    for cited in (text.replace("_", "") for text in written):
        assert OUTSIDE_REFERENCE.search(cited), cited
    for plain in ("as the spec asks", "qos_semantics_matches_spec", "random seed 7", "no issue"):
        assert not OUTSIDE_REFERENCE.search(plain), plain
