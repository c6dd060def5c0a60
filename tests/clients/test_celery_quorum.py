"""Celery 5.5+ with quorum queues (`task_default_queue_type = "quorum"`), as RabbitMQ 4.x
users run it: the worker detects the quorum queues and sets up Celery's native delayed
delivery (28 levels of quorum delay queues with `x-dead-letter-strategy: at-least-once`,
`x-overflow: reject-publish` and a TTL each, dead-lettering down to the task queue), and a
task with a countdown travels through them. The same module passes against RabbitMQ 4.3.6
(`tests/support/rabbitmq_node.py run --line 4.3 -- pytest ...`, docs/testing.md)."""

import time

import celery.exceptions
import pika
import pytest

from tests.support.celery_worker import client_app, serving_worker

WAIT = 20.0


@pytest.fixture(scope="module")
def celery_vhost(warren_broker):
    vhost = warren_broker.new_vhost("celery-quorum")
    yield vhost
    vhost.remove()


@pytest.fixture(scope="module")
def worker(celery_vhost):
    with serving_worker(celery_vhost.url, queue_type="quorum") as started:
        yield started


@pytest.fixture(scope="module")
def client(worker):
    app = client_app(worker)
    yield app
    app.close()


def get(result, worker):
    try:
        return result.get(timeout=WAIT)
    except celery.exceptions.TimeoutError as error:
        raise AssertionError(f"no result within {WAIT}s; worker log:\n{worker.log()}") \
            from error


def test_the_worker_declares_quorum_delay_queues_with_at_least_once_dead_lettering(
        client, worker, celery_vhost):
    connection = pika.BlockingConnection(celery_vhost.connection_parameters())
    try:
        channel = connection.channel()
        for level in (0, 13, 27):   # redeclared as kombu declares them: equivalent
            channel.queue_declare(f"celery_delayed_{level}", durable=True, arguments={
                "x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish", "x-message-ttl": (2 ** level) * 1000,
                **({"x-dead-letter-exchange": f"celery_delayed_{level - 1}"}
                   if level else {"x-dead-letter-exchange": "celery_delayed_delivery"})})
        channel.queue_declare(worker.queue, passive=True)
    finally:
        connection.close()


def test_a_countdown_task_runs_after_travelling_through_the_delay_queues(client, worker):
    started = time.monotonic()
    result = client.tasks["warren_test.add"].apply_async((20, 22), countdown=2)
    assert get(result, worker) == 42
    assert time.monotonic() - started >= 2.0


def test_the_delayed_task_reaches_its_queue_dead_lettered_from_the_last_delay_queue(
        client, worker):
    """The worker got the task from the delivery exchange, where celery_delayed_0
    dead-letters: the broker delayed it, not the worker holding an ETA task."""
    info = get(client.tasks["warren_test.echo_request"].apply_async(countdown=1), worker)
    assert info["exchange"] == "celery_delayed_delivery"
    assert info["routing_key"].endswith(worker.queue)
