"""--compiled for the benchmarks: run the kanin broker from the compiled build (mypyc).

tests/compiled_build.py builds the tree (cached by a digest of the sources). It is
copied into the run's work directory, as the sources are, and must hold the very sources
the run measures, or a run would compare two versions of the code. Only the broker runs
compiled: `kanin perf` and the other clients stay as they are, so both brokers are driven
by the same client code.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import harness

ROOT = Path(__file__).resolve().parent.parent
BUILD_NAME = "compiled with mypyc"


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="run the kanin broker from the compiled build of this tree (mypyc)",
    )


def snapshot(work: Path, sources: Path | None = None, root: Path = ROOT) -> Path:
    """Build (or reuse) the compiled tree of the checkout at `root` (by its own
    tests/compiled_build.py), copy it to work/compiled and return the copy.

    sources: the copy of the sources the run measures (harness.snapshot_source's), else
    root's src/."""
    built = subprocess.run(
        [harness.PYTHON, str(root / "tests" / "compiled_build.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise RuntimeError(f"--compiled: {built.stderr.strip() or built.stdout.strip()}")
    tree = Path(built.stdout.strip().splitlines()[-1])
    copy = work / "compiled"
    shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if harness.source_digest(copy) != harness.source_digest(sources or root / "src"):
        raise RuntimeError("--compiled: the built tree's sources are not the measured ones")
    imported = harness.kanin_imported_from(copy)
    if imported != copy / "kanin":
        raise RuntimeError(f"with PYTHONPATH={copy}, kanin is imported from {imported}")
    return copy


def use_for_every_broker(work: Path, sources: Path | None = None) -> dict[str, str]:
    """Make every harness.Kanin of this process start from the compiled copy; the facts
    for the report's environment."""
    harness.BROKER_TREE = snapshot(work, sources)
    return {"kanin_build": BUILD_NAME, "kanin_compiled_tree": str(harness.BROKER_TREE)}
