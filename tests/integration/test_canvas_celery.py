"""``ctx.run_canvas`` returns what Celery returns: every case of ``tests/canvas_workflows.py``
runs on plain Celery through a live worker and on Switchyard through a real manager and agent,
and the two answers must be equal, and equal to the value written in the case.

One stack for all the cases: the agent is a Celery worker on its own queue, so it runs the
Celery canvases (routed to that queue) as well as the Switchyard steps.
"""

import time

import pytest

from tests import canvas_workflows as cw
from tests.integration.harness import describe_execution
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


@pytest.mark.django_db(transaction=True)
def test_run_canvas_returns_what_a_live_celery_worker_returns_for_every_case(stack):
    stack.start_manager(concurrency=4)
    agent = stack.agent_name("canvas")
    stack.start_agent(agent, concurrency=4)
    stack.wait_for_agent(agent)

    executions = {case: services.start("itc_canvas", {"case": case, "agent": agent}) for case in cw.CASES}
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
