"""The fuzzers' seed sessions: client-to-server byte streams recorded from real clients.

Each file in tests/fuzz_seed_sessions/ is everything one client sent on one connection
(the protocol header, then frames), recorded by bench/fuzz_wire.py --record through a
recording proxy (pika, the RabbitMQ Java client, tests/support/raw_amqp.py sessions).
The file name says which client and what it did.
"""

from pathlib import Path

from tests.support.amqp_mutation import split_frames

SEED_DIR = Path(__file__).resolve().parents[1] / "fuzz_seed_sessions"


def load_seed_sessions() -> list:
    """Every seed session as a list of frames (the protocol header first)."""
    return [split_frames(path.read_bytes()) for path in sorted(SEED_DIR.glob("*.bin"))]
