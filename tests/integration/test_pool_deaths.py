"""An operation whose pool process goes under it — the operation calls ``exit(1)``, raises
``SystemExit`` or ``KeyboardInterrupt``, calls ``os._exit``, or its pool process is SIGKILLed
(the out-of-memory killer) — ends its attempt at once, reported by its agent: a lost attempt (a retryable failure,
``WorkerLost``) whose error names what ended it, retried when its retry policy allows it and
failed otherwise, run exactly as often as that says.

Each test runs ``it_pool_death`` (``tests/workflows.py``): two independent steps that end their
first invocation that way, ``retried`` (one retry allowed: it succeeds on its second attempt)
and ``final`` (none: it fails), in continue_while_possible, so the execution ends failed.
"""

import os
import signal

import pytest

from tests.integration.harness import assert_operation_events_consistent, describe_execution
from workflows_app import services
from workflows_app.models import Event, Operation
from workflows_app.states import EXECUTION_TERMINAL, FailureMode

pytestmark = pytest.mark.integration

TERMINAL = [status.value for status in EXECUTION_TERMINAL]
#: How long the execution may take to end once its operations' pool processes went: far less
#: than the minutes it took when nothing but a restart declared the attempts lost.
BOUND = 20
#: How long the operations may take to start (the agent's first pool processes, a loaded machine).
START_TIMEOUT = 60
STEPS = ("retried", "final")


def start(stack, how):
    """A manager and an agent; the execution started and both its first invocations run."""
    stack.start_manager()
    name = stack.agent_name("host")
    agent = stack.start_agent(name, concurrency=2)
    stack.wait_for_agent(name)
    execution = services.start("it_pool_death", {"agent": name, "how": how},
                               failure_mode=FailureMode.CONTINUE_WHILE_POSSIBLE.value)
    stack.wait_for(lambda: all(stack.invocations(step) for step in STEPS), START_TIMEOUT,
                   "both operations to run", lambda: describe_execution(execution.pk))
    return agent, execution


def check_lost(stack, agent, execution, cause):
    """Within BOUND seconds: each first attempt recorded lost, naming ``cause``; ``retried`` run
    again once and succeeded, ``final`` failed; each run as often as that; no traceback logged."""
    done = stack.wait_for_status(execution.pk, TERMINAL, timeout=BOUND)
    assert done.status == "failed", describe_execution(execution.pk)
    ops = {op.name: op for op in Operation.objects.filter(execution_id=execution.pk)}

    retried = ops["retried"]
    assert (retried.state, retried.attempt, retried.result) == ("succeeded", 2, "retried"), \
        describe_execution(execution.pk)
    rescheduled = list(Event.objects.filter(execution_id=execution.pk, operation="retried", type="task_rescheduled"))
    assert len(rescheduled) == 1, describe_execution(execution.pk)
    error = rescheduled[0].data["error"]
    assert error["type"] == "WorkerLost" and cause in error["message"], error

    final = ops["final"]
    assert (final.state, final.attempt) == ("failed", 1), describe_execution(execution.pk)
    assert final.error["type"] == "WorkerLost" and cause in final.error["message"], final.error

    assert [run["attempt"] for run in stack.invocations("retried")] == [1, 2]
    assert [run["attempt"] for run in stack.invocations("final")] == [1]
    assert "Traceback" not in agent.log_text(), agent.log_tail()
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_an_operation_that_calls_exit_is_lost_naming_it(stack):
    agent, execution = start(stack, "exit")
    check_lost(stack, agent, execution, "SystemExit(1)")


@pytest.mark.django_db(transaction=True)
def test_an_operation_that_raises_system_exit_is_lost_naming_it(stack):
    agent, execution = start(stack, "system_exit")
    check_lost(stack, agent, execution, "SystemExit")


@pytest.mark.django_db(transaction=True)
def test_an_operation_that_raises_keyboard_interrupt_is_lost_naming_it(stack):
    agent, execution = start(stack, "keyboard_interrupt")
    check_lost(stack, agent, execution, "KeyboardInterrupt")


@pytest.mark.django_db(transaction=True)
def test_an_operation_that_ends_its_pool_process_is_lost_naming_the_exit_code(stack):
    agent, execution = start(stack, "os_exit")
    check_lost(stack, agent, execution, "exited with code 3")


@pytest.mark.django_db(transaction=True)
def test_an_operation_whose_pool_process_is_sigkilled_is_lost_naming_the_signal(stack):
    """As the out-of-memory killer does: SIGKILL to the pool process alone, not its agent."""
    agent, execution = start(stack, "sigkill")
    for step in STEPS:
        os.kill(stack.invocations(step)[0]["pid"], signal.SIGKILL)
    check_lost(stack, agent, execution, "signal 9 (SIGKILL)")
    assert agent.alive()
