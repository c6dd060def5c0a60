"""Queue-file compaction inside a running broker: once most of a durable queue is acked,
its mostly-dead segments are deleted or compacted (docs/storage-format.md, "Segment
lifecycle"), and nothing still in the queue is lost, duplicated or reordered, even when
the broker is killed with SIGKILL afterwards."""

from pathlib import Path
import pytest


from tests.support.numbered_bodies import (PERSISTENT, body_index, connect, fill_durable_queue,
                                           numbered_body)
from tests.support.pika_helpers import _test_deadline, wait_until  # noqa: F401  (fixture)

pytestmark = pytest.mark.warren_only(
    "Warren's queue-file compaction; kills a Warren broker of its own (broker_factory)")

PIKA_TEST_TIMEOUT = 300     # publishes and consumes ~48 MiB: about 15 s here
QUEUE = "compaction-durable"
BARRIER_QUEUE = "compaction-barrier"
MESSAGES = 48_000
BODY_SIZE = 1024            # 48,000 x 1 KiB: three 16 MiB segments and a bit
KEPT = 10                   # messages with index % KEPT == 0 are never acked
PREFETCH = 6_000            # above the 4,800 held unacked, or delivery would stall
COMPACTION_WAIT = 30.0
SHRUNK = 0.4                # the segments must shrink below this share of what was published


def body(index: int) -> bytes:
    return numbered_body(index, BODY_SIZE)


def segment_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.seg"))


def test_compaction_reclaims_acked_segments_and_keeps_the_rest(broker_factory, tmp_path):
    data_dir = tmp_path / "data"
    broker = broker_factory(data_dir=str(data_dir))

    # 1. ~48 MiB of persistent messages, durable once each Tx.Commit-Ok arrives.
    fill_durable_queue(broker.port, QUEUE, MESSAGES, BODY_SIZE)
    (queue_dir,) = (data_dir / "queues").iterdir()
    published = segment_bytes(queue_dir)
    assert published >= MESSAGES * BODY_SIZE

    # 2. Consume everything; ack all but every KEPT-th message, which stays unacked.
    consumer = connect(broker.port)
    channel = consumer.channel()
    channel.basic_qos(prefetch_count=PREFETCH)
    held = []

    def on_message(channel_, method, _properties, data):
        index = body_index(data)
        assert data == body(index)
        if index % KEPT == 0:
            held.append(index)
        else:
            channel_.basic_ack(method.delivery_tag)

    channel.basic_consume(QUEUE, on_message)

    def all_delivered():
        return len(held) == MESSAGES // KEPT

    assert wait_until(consumer, all_delivered, timeout=120), f"{len(held)} held"
    assert held == list(range(0, MESSAGES, KEPT))

    # 3. With 90 % acked, the old segments go: deleted or compacted into the active one.
    def shrunk():
        return segment_bytes(queue_dir) < SHRUNK * published

    def compacted():
        return any("event=segment_compacted" in line for line in broker.log_lines)

    assert wait_until(consumer, shrunk, timeout=COMPACTION_WAIT), (
        f"segments still hold {segment_bytes(queue_dir)} of {published} bytes: "
        f"{sorted(path.name for path in queue_dir.glob('*.seg'))}")
    # Every old segment kept 10 % of its messages: only compaction can have removed it.
    assert wait_until(consumer, compacted), "no event=segment_compacted logged"

    # 4. Closing the consumer requeues the held messages. A confirmed publish to another
    # durable queue makes the acks and delivered marks before it durable (its commit
    # writes them too), then the broker is killed and restarted on the same data.
    consumer.close()
    barrier = connect(broker.port)
    channel = barrier.channel()
    channel.queue_declare(BARRIER_QUEUE, durable=True)
    channel.confirm_delivery()
    channel.basic_publish("", BARRIER_QUEUE, b"barrier", PERSISTENT)
    broker.process.kill()
    broker.process.wait(10)

    broker = broker_factory(data_dir=str(data_dir))
    connection = connect(broker.port)
    channel = connection.channel()
    recovered = []
    while True:
        method, _properties, data = channel.basic_get(QUEUE, auto_ack=True)
        if method is None:
            break
        recovered.append((body_index(data), data, method.redelivered))
    assert [index for index, _, _ in recovered] == list(range(0, MESSAGES, KEPT))
    assert all(data == body(index) for index, data, _ in recovered)
    assert all(redelivered for _, _, redelivered in recovered)
    assert channel.queue_declare(QUEUE, passive=True).method.message_count == 0
    problems = [line for line in broker.log_lines if "event=recovery_problem" in line]
    assert problems == []
    connection.close()
