"""The ``switchyard`` fixture with a real agent: the operations of one agent run in an agent
process of their own (``run_agent``), through the broker, while the harness plays the managers
in the test's transaction."""

import os

import pytest

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
