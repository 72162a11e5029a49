"""A Celery 5 app using the broker under test as its transport (py-amqp) and the 'rpc://'
result backend, with a real worker (solo pool) on a thread.

The rpc backend sends each result as a message to a queue owned by the calling client, so a
task's return value (or exception) travels back over AMQP too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlparse

import kombu
import pika
import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.worker import state as worker_state

pytestmark = pytest.mark.timeout(45)

RESULT_TIMEOUT_S = 20.0


def kombu_url(amqp_url: str) -> str:
    """Turn the suite's amqp:// URL into the pyamqp:// form Celery configurations use."""
    parsed = urlparse(amqp_url)
    vhost = unquote(parsed.path[1:]) if parsed.path else "/"
    user = unquote(parsed.username or "guest")
    password = unquote(parsed.password or "guest")
    path = "/" if vhost == "/" else vhost
    return f"pyamqp://{user}:{password}@{parsed.hostname}:{parsed.port or 5672}/{path}"


class Boom(ValueError):
    pass


def make_app(broker_url: str, queue: str) -> Celery:
    app = Celery("kanin_compat", broker=kombu_url(broker_url), backend="rpc://")
    app.conf.update(
        task_default_queue=queue,  # also the name of the default exchange and routing key
        broker_connection_retry_on_startup=False,
        broker_connection_max_retries=1,
        broker_connection_timeout=5,
        worker_hijack_root_logger=False,
        result_expires=60,
    )

    @app.task(name="compat.add", shared=False)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="compat.explode", shared=False)
    def explode(text: str) -> None:
        raise Boom(text)

    return app


@pytest.fixture
def celery_app(broker: Any, unique: Any) -> Iterator[Celery]:
    queue = unique("celery")
    app = make_app(broker.url, queue)
    try:
        yield app
    finally:
        # Close the connection the rpc backend opened to receive results in this thread.
        result_consumer = app.backend.result_consumer
        if getattr(result_consumer, "_connection", None) is not None:
            result_consumer.stop()
        app.close()
        # The task queue and its exchange are durable: remove them from a shared broker.
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            connection.channel().queue_delete(queue)
            connection.channel().exchange_delete(queue)
        finally:
            connection.close()


@contextmanager
def run_worker(app: Celery) -> Iterator[Any]:
    """A real worker on a thread (solo pool), stopped promptly when the block ends."""
    with start_worker(
        app, pool="solo", perform_ping_check=False, shutdown_timeout=10, loglevel="WARNING"
    ) as worker:
        try:
            yield worker
        finally:
            # start_worker asks the worker to stop by setting this flag, but the worker only
            # looks at it between polls, which can block for up to 10 s: wake it up now.
            worker_state.should_terminate = 0
            if worker.hub is not None:
                worker.hub.call_soon(lambda: None)


def test_celery_task_result_comes_back(celery_app: Celery) -> None:
    add = celery_app.tasks["compat.add"]
    with run_worker(celery_app):
        result = add.delay(2, 3)
        assert result.get(timeout=RESULT_TIMEOUT_S) == 5
        assert result.status == "SUCCESS"
        # Several in flight at once; each result finds its own AsyncResult.
        results = [add.delay(i, i) for i in range(20)]
        assert [r.get(timeout=RESULT_TIMEOUT_S) for r in results] == [2 * i for i in range(20)]


def test_celery_task_exception_comes_back(celery_app: Celery) -> None:
    explode = celery_app.tasks["compat.explode"]
    with run_worker(celery_app):
        result = explode.delay("kaboom")
        with pytest.raises(Boom, match="kaboom"):
            result.get(timeout=RESULT_TIMEOUT_S)
        assert result.status == "FAILURE"


def test_celery_countdown_task(celery_app: Celery) -> None:
    """An ETA task is held unacked by the worker, which raises its prefetch via basic.qos."""
    add = celery_app.tasks["compat.add"]
    with run_worker(celery_app):
        start = time.monotonic()
        delayed = add.apply_async((4, 5), countdown=1)
        prompt = add.delay(1, 1)
        assert prompt.get(timeout=RESULT_TIMEOUT_S) == 2
        assert delayed.get(timeout=RESULT_TIMEOUT_S) == 9
        assert time.monotonic() - start >= 0.9


def test_kombu_uses_global_qos(broker: Any) -> None:
    """kombu's test for the broker's basic.qos semantics, which Celery's worker follows."""
    with kombu.Connection(kombu_url(broker.url)) as connection:
        connection.connect()
        # False means "RabbitMQ 3.3-3.x semantics": the worker will use global=true.
        assert connection.qos_semantics_matches_spec is False


def test_worker_full_of_eta_tasks_still_takes_new_tasks(celery_app: Celery) -> None:
    """Celery holds ETA tasks unacked and, for each, raises its prefetch with basic.qos so
    that it can take further tasks. It does so with global=true only when the broker says it
    is RabbitMQ 3.3-3.x, because for RabbitMQ a per-consumer (global=false) limit does not
    grow for a consumer that exists already. Here the prefetch is 1 and three ETA tasks, due
    long after the test, fill it: the task sent after them must still run."""
    add = celery_app.tasks["compat.add"]
    celery_app.conf.worker_prefetch_multiplier = 1  # solo pool: a prefetch of 1
    with run_worker(celery_app):
        later = [add.apply_async((i, i), countdown=600) for i in range(3)]
        now = add.delay(20, 22)
        assert now.get(timeout=RESULT_TIMEOUT_S) == 42
        assert [result.state for result in later] == ["PENDING"] * 3
