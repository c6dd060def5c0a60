"""Celery over the broker: a real worker process executes tasks sent from the test.

One `celery worker` subprocess (solo pool, one unique queue, mingle, gossip and events
on) serves the module; the test process is the Celery client, with the rpc:// result
backend, so results come back as messages on the client's own reply queue. Remote
control (ping, inspect) goes over the per-run control exchange (fanout) and the reply
exchange. Every wait is bounded: `result.get(timeout=...)`, the worker's "ready" line,
and the worker's exit after SIGTERM (a warm shutdown that must exit with 0).
"""

import time

import celery.exceptions
import pytest
from celery import chain, group

from tests.support.celery_worker import client_app, serving_worker

WAIT = 10.0


@pytest.fixture(scope="module")
def celery_vhost(warren_broker):
    """A vhost and user of the plugin's broker for this module: the worker runs for the
    whole module, longer than a test's `warren` vhost lives."""
    vhost = warren_broker.new_vhost("celery")
    yield vhost
    vhost.remove()


@pytest.fixture(scope="module")
def worker(celery_vhost):
    with serving_worker(celery_vhost.url) as started:
        yield started


@pytest.fixture(scope="module")
def client(worker):
    app = client_app(worker)
    yield app
    app.close()


def task(app, name):
    return app.tasks[f"warren_test.{name}"]


def get(result, worker):
    """`result.get` bounded by WAIT; a timeout fails with the worker's log attached."""
    try:
        return result.get(timeout=WAIT)
    except celery.exceptions.TimeoutError as error:
        raise AssertionError(f"no result within {WAIT}s; worker log:\n{worker.log()}") \
            from error


def test_delay_returns_result(client, worker):
    result = task(client, "add").delay(2, 3)
    assert get(result, worker) == 5     # no celery TimeoutError: the result came back
    assert result.state == "SUCCESS"


def test_several_tasks_in_flight(client, worker):
    add = task(client, "add")
    results = [add.delay(n, n) for n in range(8)]
    assert [get(r, worker) for r in results] == [2 * n for n in range(8)]


def test_task_runs_on_the_worker_from_its_queue(client, worker):
    info = get(task(client, "echo_request").delay(), worker)
    assert info["hostname"] == worker.hostname
    assert info["routing_key"] == worker.queue
    # Celery sends to the queue through the default exchange (or its own named one).
    assert info["exchange"] in ("", worker.queue)
    assert info["redelivered"] is False


def test_task_exception_propagates(client, worker):
    result = task(client, "fail").delay("boom")
    with pytest.raises(ValueError, match="boom"):
        get(result, worker)
    assert result.state == "FAILURE"


def test_retry_republishes_the_task(client, worker):
    assert get(task(client, "retry_once").delay("x"), worker) == {"value": "x", "retries": 1}


def test_countdown_task_waits_for_its_eta(client, worker):
    started = time.monotonic()
    result = task(client, "add").apply_async((20, 22), countdown=1)
    assert get(result, worker) == 42
    assert time.monotonic() - started >= 1.0


def test_group_and_chain(client, worker):
    add = task(client, "add")
    assert get(group(add.s(n, 1) for n in range(4))(), worker) == [1, 2, 3, 4]
    assert get(chain(add.s(1, 2), add.s(3), add.s(4))(), worker) == 10


def test_remote_control_ping_and_inspect(client, worker):
    replies = client.control.ping(destination=[worker.hostname], timeout=WAIT)
    assert replies == [{worker.hostname: {"ok": "pong"}}]
    inspect = client.control.inspect(destination=[worker.hostname], timeout=WAIT)
    queues = inspect.active_queues()
    assert [q["name"] for q in queues[worker.hostname]] == [worker.queue]
    registered = inspect.registered()[worker.hostname]
    assert "warren_test.add" in registered
