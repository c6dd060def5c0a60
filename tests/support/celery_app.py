"""A minimal Celery app for tests/clients/test_celery.py.

The worker subprocess loads it with `celery -A celery_app worker`; its settings come from
environment variables the test sets. The test process builds its own client app with
`make_app` from the same settings: task names are explicit, so both apps agree on them.
"""

import os

from celery import Celery

BROKER_ENV = "WARREN_CELERY_BROKER"
QUEUE_ENV = "WARREN_CELERY_QUEUE"
CONTROL_EXCHANGE_ENV = "WARREN_CELERY_CONTROL_EXCHANGE"
EVENT_EXCHANGE_ENV = "WARREN_CELERY_EVENT_EXCHANGE"
QUEUE_TYPE_ENV = "WARREN_CELERY_QUEUE_TYPE"


def make_app(broker_url: str, queue: str, control_exchange: str,
             event_exchange: str, queue_type: str = "classic") -> Celery:
    """A Celery app on `broker_url` with the rpc:// result backend (results travel back
    as messages to a reply queue of the calling client) whose tasks go to `queue`.

    The remote-control and event exchanges are named per test run, so workers of other
    runs on the same broker never answer this run's broadcasts. With `queue_type`
    "quorum" the task queue is a quorum queue behind a topic exchange: Celery 5.5+ then
    sends countdown and ETA tasks through its native delayed delivery (quorum delay
    queues with at-least-once dead-lettering, kombu/transport/native_delayed_delivery.py)."""
    app = Celery("warren_celery_test", broker=broker_url, backend="rpc://")
    app.conf.update(
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        control_exchange=control_exchange,
        event_exchange=event_exchange,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=False,
        broker_connection_max_retries=1,
        broker_connection_timeout=5,
        worker_hijack_root_logger=False,
        worker_send_task_events=True,
        task_send_sent_event=True,
    )
    if queue_type == "quorum":
        app.conf.update(task_default_queue_type="quorum",
                        task_default_exchange_type="topic",
                        broker_native_delayed_delivery_queue_type="quorum")
    register_tasks(app)
    return app


def add(x, y):
    return x + y


def fail(message):
    raise ValueError(message)


def retry_once(task, value):
    if task.request.retries == 0:
        raise task.retry(countdown=0)
    return {"value": value, "retries": task.request.retries}


def echo_request(task):
    info = task.request.delivery_info or {}
    return {"routing_key": info.get("routing_key"), "exchange": info.get("exchange"),
            "redelivered": info.get("redelivered"), "hostname": task.request.hostname}


def register_tasks(app: Celery) -> None:
    """Register the tasks on `app` only (shared=False: Celery would otherwise add every
    app's tasks to every other app of the process, and the client app is a second app)."""
    app.task(name="warren_test.add", shared=False)(add)
    app.task(name="warren_test.fail", shared=False)(fail)
    app.task(name="warren_test.retry_once", bind=True, max_retries=3, default_retry_delay=0,
             shared=False)(retry_once)
    app.task(name="warren_test.echo_request", bind=True, shared=False)(echo_request)


app = make_app(
    os.environ.get(BROKER_ENV, "amqp://guest:guest@127.0.0.1:5672//"),
    os.environ.get(QUEUE_ENV, "warren-test"),
    os.environ.get(CONTROL_EXCHANGE_ENV, "warren-test-control"),
    os.environ.get(EVENT_EXCHANGE_ENV, "warren-test-events"),
    os.environ.get(QUEUE_TYPE_ENV, "classic"),
)
