"""``ctx.run_canvas`` returns what Celery returns: every case of ``tests/canvas_workflows.py``
runs on plain Celery through a live worker and on Switchyard through a real manager and agent,
and the two answers must be equal, and equal to the value written in the case.

One stack for all the cases: the agent is a Celery worker on its own queue, so it runs the
Celery canvases (routed to that queue) as well as the Switchyard steps.

Celery's canvases need a result backend (a chord counts its header's results there); Switchyard's
do not. On a broker that is no result backend (RabbitMQ: settings.py configures none, the
results are in the database) the Celery side gets a Redis of the test's own, as a Celery project
on RabbitMQ that uses chords configures one.
"""

import gc
import time
from contextlib import contextmanager

import pytest
from celery import Celery, current_app
from django.conf import settings

from tests import canvas_workflows as cw
from tests.integration.harness import RedisServer, describe_execution
from workflows_app import services
from workflows_app.states import EXECUTION_TERMINAL

pytestmark = pytest.mark.integration

TERMINAL = [status.value for status in EXECUTION_TERMINAL]
TIMEOUT = 60


def celery_answer(result, deadline):
    """What a Celery canvas returned. Waits for ``ready()`` before ``get()``: on a group's
    result ``get()`` can wait forever although every task succeeded (Celery 5.6 with the Redis
    backend, on ``group(chain(a, group(b, c)))``), while after ``ready()`` it returns at once."""
    while not result.ready():
        if time.monotonic() > deadline:
            raise TimeoutError("not ready in time")
        time.sleep(0.05)
    return result.get(timeout=max(1.0, deadline - time.monotonic()))


@pytest.fixture
def result_backend(tmp_path):
    """The result backend of the Celery side: the project's, else a Redis of the test's own."""
    if settings.CELERY_RESULT_BACKEND:
        yield settings.CELERY_RESULT_BACKEND
        return
    server = RedisServer(tmp_path / "results").start()
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture
def celery_side(result_backend):
    """The Celery app that sends the plain Celery canvases and reads their results: the project's
    when it has a result backend, else one on the project's broker and ``result_backend``
    (``celery_echo`` is a shared task: every app has it)."""
    if settings.CELERY_RESULT_BACKEND:
        yield current_app._get_current_object()
        return
    # A result that outlives its Redis unsubscribes when it is freed, and would retry that for
    # minutes: no retries here, and the results of a test that passed are freed before.
    app = Celery("canvas-reference", broker=settings.CELERY_BROKER_URL, backend=result_backend, set_as_current=False,
                 result_backend_transport_options={"retry_policy": {"max_retries": 0}})
    try:
        yield app
    finally:
        gc.collect()
        app.close()


@contextmanager
def current(app):
    """``app`` as Celery's current app: canvases and signatures made without an app take it."""
    previous = current_app._get_current_object()
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()


@pytest.mark.django_db(transaction=True)
def test_run_canvas_returns_what_a_live_celery_worker_returns_for_every_case(stack, celery_side, result_backend):
    stack.start_manager(concurrency=4)
    agent = stack.agent_name("canvas")
    # The agent runs the Celery canvases' tasks too: they store their results in the same backend.
    stack.manage(agent, "run_agent", agent, "--concurrency", "4", "--loglevel", "INFO",
                 env={"CELERY_RESULT_BACKEND": result_backend})
    stack.wait_for_agent(agent)

    executions = {case: services.start("itc_canvas", {"case": case, "agent": agent}) for case in cw.CASES}
    with current(celery_side):  # each result keeps the app it was made with
        celery_results = {case: cw.build(case, cw.celery_echo, agent).apply_async() for case in cw.CASES}

    mismatches, deadline = [], time.monotonic() + TIMEOUT
    for case in cw.CASES:
        expected = cw.expected(case)
        try:
            celery = celery_answer(celery_results[case], deadline)
        except Exception as exc:  # a failed or lost Celery canvas is this case's mismatch, not the end
            celery = f"<{type(exc).__name__}: {exc}>"
        done = stack.wait_for_status(executions[case].pk, TERMINAL, timeout=max(1.0, deadline - time.monotonic()))
        if done.status != "completed":
            mismatches.append(f"{case}: Celery returned {celery!r}, Switchyard's execution "
                              f"{done.status}:\n{describe_execution(done.pk)}")
        elif not celery == done.payload["result"] == expected:
            mismatches.append(f"{case}: Celery returned {celery!r}, Switchyard {done.payload['result']!r}, "
                              f"the case says {expected!r}")
    assert not mismatches, "\n".join(mismatches)
