"""The ``switchyard`` fixture with a real agent: the operations of one agent run in an agent
process of their own (``run_agent``), through the broker, while the harness plays the managers
in the test's transaction."""

import os
import uuid

import pytest
from celery import current_app

from workflows_app import signing
from workflows_app.broker import RUNNER_TASK
from workflows_app.wire import keys

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_an_agents_operations_run_on_a_real_agent_when_the_test_asks(switchyard):
    switchyard.agent("harness-warehouse")
    result = switchyard.run("harness_warehouse", {"skus": ["apple", "pear"], "agent": "harness-warehouse"})

    assert result.status == "completed", result.error
    assert result.payload == {"reserved": ["reserve-apple", "reserve-pear"]}
    for name in ("reserve-apple", "reserve-pear"):
        operation = result.operations[name]
        assert (operation.agent, operation.attempt, operation.state) == ("harness-warehouse", 2, "succeeded")
        # Run by the agent's process, not in the test's: another incarnation, another pid.
        assert operation.incarnation not in ("", "test-harness")
        assert operation.result["pid"] != os.getpid()
    logs = [event for event in result.events if event.type == "log" and event.message == "got through"]
    assert len(logs) == 2


def test_the_other_operations_still_run_in_the_test(switchyard):
    switchyard.agent("harness-warehouse")
    result = switchyard.run("harness_warehouse", {"skus": ["apple"]})  # agent "warehouse": not the real one
    operation = result.operations["reserve-apple"]
    assert (operation.state, operation.incarnation, operation.result["pid"]) == ("succeeded", "test-harness", os.getpid())


def test_a_message_left_in_the_agents_queue_by_another_run_does_not_hold_it(switchyard):
    switchyard.agent("harness-warehouse")
    # An attempt of an operation this test's database does not hold (an earlier run's, killed
    # midway): its claim has no answer from the intake; the harness answers "drop".
    args = [str(uuid.uuid4()), 1]
    proof = keys.prove(signing.agent_key("harness-warehouse"), keys.Purpose.OPERATION, args)
    current_app.send_task(RUNNER_TASK, args=args, kwargs={"proof": proof}, queue="harness-warehouse", serializer="json")
    result = switchyard.run("harness_warehouse", {"skus": ["apple"], "agent": "harness-warehouse"})
    assert result.status == "completed", result.error
