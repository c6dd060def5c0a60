"""scripts/serve.sh, the README's start command: it makes its own `.venv` with an
editable (pure-Python) install and starts `warren serve` with the arguments it is given.
What it runs does not depend on the build under test, so the compiled build's run leaves
it out (`build_independent`; scripts/test.sh)."""

import subprocess
from pathlib import Path

import pika
import pytest

from tests.support.broker_process import LISTENING

pytestmark = [
    pytest.mark.warren_only("starts a Warren broker with the README's start command"),
    pytest.mark.build_independent,
]


def test_serve_sh_passes_its_arguments_to_warren_serve(tmp_path):
    """The README's start command with flags: they reach `warren serve` (not pip)."""
    repo = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        ["bash", str(repo / "scripts" / "serve.sh"), "--port", "0", "--data-dir",
         str(tmp_path / "data"), "--log-level", "info", "--management-port", "auto"],
        stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in process.stderr:     # pip (first use only), then the broker's log
            found = LISTENING.search(line)
            if found and found.group(1) == "listening":
                port = int(found.group(3))
                break
        assert port is not None, f"serve.sh exited with {process.wait()}"
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        connection.close()
    finally:
        process.kill()
        process.wait()
    assert (tmp_path / "data").is_dir()
