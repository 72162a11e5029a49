"""The suite again, against the compiled build (setup.py compiles the hot modules with
mypyc by default): both builds must behave the same, and only a run of the compiled one
shows where they do not (a generator's finally, a native class's rules).

The build is made by tests/compiled_build.py (cached by a digest of the sources), and a
pytest subprocess runs the non-spark, non-slow tests with PYTHONPATH on that tree; the
brokers those tests start as processes inherit it. KANIN_EXPECT_COMPILED makes that run
check it really imports the compiled modules (conftest.py). That run starts in the
background once this test is collected and goes on beside the rest of the suite
(tests/compiled_run.py); this test waits for it. Skipped where no C compiler or mypyc is
available. Marked slow: the fast loop leaves it out, a full run includes it.
"""

from __future__ import annotations

import pytest

import compiled_run

pytestmark = [pytest.mark.compiled, pytest.mark.slow]


@pytest.mark.timeout(compiled_run.INNER_TIMEOUT_S + 600)
def test_the_fast_suite_passes_against_the_compiled_build() -> None:
    # The build's time comes on top of the inner run's.
    result = compiled_run.outcome(compiled_run.INNER_TIMEOUT_S + 540)
    if result.skipped:
        pytest.skip(result.skipped)
    # The inner run's failures, as its own summary lists them, are this test's message.
    summary = [line for line in result.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert result.returncode == 0, "\n".join(
        [*summary, *result.stdout.splitlines()[-5:], result.stderr[-2000:]]
    )
    assert " passed" in result.stdout.splitlines()[-1]  # it ran tests, not nothing
