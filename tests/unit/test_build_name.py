"""`kanin --version` names the build it runs (compiled with mypyc, or pure Python), and
that name is true to the modules Python imports."""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys

import kanin.core.channel
from kanin import __version__
from kanin.native import build_name


def test_the_build_name_says_whether_the_hot_modules_are_extension_modules() -> None:
    native = kanin.core.channel.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    assert build_name() == ("compiled with mypyc" if native else "pure Python")
    if os.environ.get("KANIN_EXPECT_COMPILED"):
        assert native


def test_kanin_version_names_the_build() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kanin", "--version"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"kanin {__version__} ({build_name()})"
