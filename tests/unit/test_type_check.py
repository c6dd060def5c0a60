"""The type check: mypy over what pyproject.toml's [tool.mypy] names (amqp_codec,
broker and storage), with its settings, run as a subprocess so that
scripts/test.sh runs it with every other test. mypy comes with the `test` extra (pip
install -e ".[test]")."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 600   # seconds: a deadline for a hung run, not a measure of speed

# Chains through the core's back pointers. Were an annotation dropped from a constructor,
# the chain would silently become Any, which mypy accepts; assert_type does not. A queue
# sees its vhost and its consumers' channels as the base classes queue_base.py declares.
TYPED_CHAINS = textwrap.dedent("""
    from typing import assert_type

    from broker.core.broker import Broker, BrokerConfig
    from broker.core.channel import Channel
    from broker.core.connection import Connection
    from broker.core.persistence import Persistence
    from broker.core.ports import Transport
    from broker.core.queue import Consumer, Queue
    from broker.core.queue_base import ClientConnection, ConsumerChannel, QueueHost
    from broker.core.scheduler import Scheduler
    from broker.core.vhost import VirtualHost


    def chains(consumer: Consumer, channel: Channel, queue: Queue) -> None:
        assert_type(consumer.channel.connection.transport.writable, bool)
        assert_type(consumer.channel.connection.transport, Transport)
        assert_type(consumer.channel, ConsumerChannel[ClientConnection])
        assert_type(consumer.queue.vhost.scheduler, Scheduler)
        assert_type(channel.connection.broker.config, BrokerConfig)
        assert_type(channel.connection.broker, Broker)
        assert_type(channel.connection, Connection)
        assert_type(channel.vhost, VirtualHost)
        assert_type(channel.vhost.persistence, Persistence)
        assert_type(queue.vhost, QueueHost)
        assert_type(channel.connection.vhost, VirtualHost | None)
""")


def run_mypy(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", *arguments], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)


def _report(result: subprocess.CompletedProcess) -> str:
    return (f"mypy exited {result.returncode} (install it with the test extra: "
            f"pip install -e '.[test]'):\n{result.stdout}{result.stderr}")


def test_mypy_accepts_the_codec_the_core_and_the_server():
    result = run_mypy()
    assert result.returncode == 0, _report(result)


def test_the_core_back_pointers_are_typed_all_the_way(tmp_path):
    snippet = tmp_path / "typed_chains.py"
    snippet.write_text(TYPED_CHAINS)
    result = run_mypy(str(snippet))
    assert result.returncode == 0, _report(result)
