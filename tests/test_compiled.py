"""The suite again, against the compiled build (setup.py compiles the hot modules with
mypyc by default): both builds must behave the same, and only a run of the compiled one
shows where they do not (a generator's finally, a native class's rules).

The build is made by tests/compiled_build.py (cached by a digest of the sources), and a
pytest subprocess runs the non-spark, non-slow tests with PYTHONPATH on that tree; the
brokers those tests start as processes inherit it. KANIN_EXPECT_COMPILED makes that run
check it really imports the compiled modules (conftest.py). Skipped where no C compiler
or mypyc is available. Marked slow: the fast loop leaves it out, a full run includes it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compiled_build import ROOT, NotCompiled, compiled_tree

pytestmark = [pytest.mark.compiled, pytest.mark.slow]

# The inner run: everything the fast loop runs but this file (no recursion) and what is
# the same either way, to keep the whole suite's time down: test_code_quality.py (reads the
# sources, runs ruff and mypy), the web UI's browser tests (JavaScript over the management
# API, whose answers test_mgmt_*.py check compiled) and kanin ctl's (an HTTP client of that
# same API).
SELECTION = "not spark and not slow and not compiled"
SAME_EITHER_WAY = (
    "--ignore=tests/test_code_quality.py",
    "--ignore=tests/integration/test_mgmt_web_ui.py",
    "--ignore=tests/ctl",
)
INNER_TIMEOUT_S = 30 * 60


@pytest.mark.timeout(INNER_TIMEOUT_S + 60)
def test_the_fast_suite_passes_against_the_compiled_build() -> None:
    try:
        tree = compiled_tree()
    except NotCompiled as exc:
        pytest.skip(f"no compiled build: {exc}")
    environment = os.environ | {"PYTHONPATH": str(tree), "KANIN_EXPECT_COMPILED": "1"}
    command = [sys.executable, "-m", "pytest", "-m", SELECTION, "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [*command, *SAME_EITHER_WAY, "tests"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=INNER_TIMEOUT_S,
    )
    # The inner run's failures, as its own summary lists them, are this test's message.
    summary = [line for line in result.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert result.returncode == 0, "\n".join(
        [*summary, *result.stdout.splitlines()[-5:], result.stderr[-2000:]]
    )
