"""Running a small suite with the warren plugin in a pytest of its own (pytester)."""

import pytest


def run_pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run pytester's files in a subprocess. Its temporary paths, named after the test,
    are longer than a Unix socket path may be, so these runs also show the test broker
    placing its control socket elsewhere. A subprocess, because an in-process run
    (pytester.runpytest) re-imports modules and fails inside SQLAlchemy's compiled
    extensions when the broker starts again in this process."""
    return pytester.runpytest_subprocess(*args)
