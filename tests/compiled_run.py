"""The compiled build's run of the suite, started in the background as soon as the outer
run has collected tests/test_compiled.py, so that it overlaps the rest of the outer run.

The suite spends much of its time waiting (brokers starting, timers, Spark), so two runs
side by side take far less wall time than one after the other. conftest.py starts it
(pytest_collection_finish) and stops it if the outer run ends first;
tests/test_compiled.py waits for its outcome and asserts on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from compiled_build import ROOT, NotCompiled, compiled_tree

TEST_ID = "tests/test_compiled.py::test_the_fast_suite_passes_against_the_compiled_build"
# The inner run: everything the fast loop runs but test_compiled.py (no recursion) and what
# is the same either way, to keep the whole suite's time down: test_code_quality.py (reads
# the sources, runs ruff and mypy), the web UI's browser tests (JavaScript over the
# management API, whose answers test_mgmt_*.py check compiled) and kanin ctl's (an HTTP
# client of that same API).
SELECTION = "not spark and not slow and not compiled"
SAME_EITHER_WAY = (
    "--ignore=tests/test_code_quality.py",
    "--ignore=tests/integration/test_mgmt_web_ui.py",
    "--ignore=tests/ctl",
)
INNER_TIMEOUT_S = 30 * 60


@dataclass
class Outcome:
    skipped: str | None = None  # why there is no compiled build here
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""


class CompiledRun:
    """Build the compiled tree, then run the inner pytest on it, on a thread of its own."""

    def __init__(self) -> None:
        self.outcome: Outcome | None = None
        self._process: subprocess.Popen[str] | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="compiled-run", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait(self, timeout_s: float) -> Outcome:
        self._thread.join(timeout_s)
        if self.outcome is None:
            self.stop()
            self._thread.join(60)
        return self.outcome or Outcome(returncode=-1, stderr="the compiled run did not end")

    def stop(self) -> None:
        """End the inner run (our own child, by its handle) if it is still going."""
        with self._lock:
            self._stopped = True
            if self._process is not None and self._process.poll() is None:
                self._process.kill()

    def _run(self) -> None:
        try:
            tree = compiled_tree()
        except NotCompiled as exc:
            self.outcome = Outcome(skipped=f"no compiled build: {exc}")
            return
        except Exception as exc:  # a failed build is this test's failure, not a crash
            self.outcome = Outcome(returncode=-1, stderr=f"the build failed: {exc!r}")
            return
        self.outcome = self._inner_pytest(tree)

    def _inner_pytest(self, tree: Path) -> Outcome:
        environment = os.environ | {"PYTHONPATH": str(tree), "KANIN_EXPECT_COMPILED": "1"}
        base = Path(tempfile.mkdtemp(prefix="kanin-compiled-run-"))
        command = [sys.executable, "-m", "pytest", "-m", SELECTION, "-q"]
        command += ["-p", "no:cacheprovider", f"--basetemp={base / 'tmp'}"]
        with self._lock:
            if self._stopped:
                return Outcome(returncode=-1, stderr="stopped before it started")
            self._process = subprocess.Popen(
                [*command, *SAME_EITHER_WAY, "tests"],
                cwd=ROOT,
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        try:
            stdout, stderr = self._process.communicate(timeout=INNER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            stdout, stderr = self._process.communicate()
            stderr += f"\nthe inner run took more than {INNER_TIMEOUT_S} s"
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return Outcome(returncode=self._process.returncode, stdout=stdout, stderr=stderr)


_RUN: CompiledRun | None = None


def start_once() -> None:
    global _RUN
    if _RUN is None:
        _RUN = CompiledRun()
        _RUN.start()


def outcome(timeout_s: float) -> Outcome:
    """The inner run's outcome; started now if the collection hook did not start it."""
    start_once()
    assert _RUN is not None
    return _RUN.wait(timeout_s)


def stop() -> None:
    if _RUN is not None:
        _RUN.stop()
