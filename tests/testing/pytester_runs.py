"""Running a small suite with the warren plugin in a pytest of its own (pytester)."""

import tempfile

import pytest


def run_pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run pytester's files in a subprocess with a short --basetemp: the test broker's
    control socket is in its data directory under it, and a Unix socket path has at
    most 107 bytes (pytester's own temporary paths, named after the test, are longer).
    A subprocess, because an in-process run (pytester.runpytest) fails inside
    SQLAlchemy's compiled extensions when the broker starts again in this process."""
    with tempfile.TemporaryDirectory(prefix="w-") as basetemp:
        return pytester.runpytest_subprocess(f"--basetemp={basetemp}", *args)
