"""The limits of operations with real processes: two managers and two agents (``run_manager``,
``run_agent``) on the test's database and broker. Whichever manager sends a step, and whatever
the number of agents and their pool processes, an operation's concurrency and rate hold across
all of them; a manager restarted while steps wait finds the limit where it was (it is in the
database). The times come from the database: an attempt holds its slot from ``sending_at`` to its
end."""

from datetime import timedelta

import pytest

from tests.integration.harness import describe_execution
from workflows_app import services
from workflows_app.models import Operation
from workflows_app.states import EXECUTION_TERMINAL

pytestmark = pytest.mark.integration
TERMINAL = [status.value for status in EXECUTION_TERMINAL]


def up(stack, managers=2):
    started = [stack.start_manager(concurrency=2, name=f"manager-{i}") for i in range(managers)]
    names = [stack.agent_name("host-1"), stack.agent_name("host-2")]
    for name in names:
        stack.start_agent(name, concurrency=3)
    for name in names:
        stack.wait_for_agent(name)
    return started, names


def most_at_once(intervals) -> int:
    """The most of ``intervals`` (start, end) that overlap at one moment."""
    points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda point: (point[0], point[1]))
    most = now = 0
    for _, step in points:
        now += step
        most = max(most, now)
    return most


def ended(execution):
    return list(Operation.objects.filter(execution_id=execution.pk).order_by("sending_at"))


@pytest.mark.django_db(transaction=True)
def test_two_at_once_across_two_managers_and_two_agents_of_three_processes_each(stack):
    _, agents = up(stack)
    execution = services.start("it_limited_fan_out", {"op": "it_limited", "n": 12, "agents": agents, "seconds": 0.3})
    done = stack.wait_for_status(execution.pk, TERMINAL, timeout=90)
    assert done.status == "completed", describe_execution(execution.pk)
    steps = ended(execution)
    assert most_at_once([(op.sending_at, op.succeeded_at) for op in steps]) == 2, describe_execution(execution.pk)
    assert len(stack.invocations("it_limited")) == 12, "each ran once"
    assert {op.agent for op in steps} == set(agents)


@pytest.mark.django_db(transaction=True)
def test_a_rate_holds_across_managers_and_a_restarted_manager_keeps_it(stack):
    managers, agents = up(stack)
    execution = services.start("it_limited_fan_out", {"op": "it_rated", "n": 16, "agents": agents})
    stack.wait_for(lambda: Operation.objects.filter(execution_id=execution.pk, flow_wait="rate_limit").exists(),
                   timeout=30, what="steps held back by the rate")
    stack.kill(managers[0])  # a manager gone while steps wait: what it knew of the rate is in the database
    stack.start_manager(concurrency=2, name="manager-again")
    done = stack.wait_for_status(execution.pk, TERMINAL, timeout=90)
    assert done.status == "completed", describe_execution(execution.pk)
    sends = sorted(op.sending_at for op in ended(execution))
    window = timedelta(seconds=1)
    busiest = max(sum(1 for other in sends if at <= other < at + window) for at in sends)
    assert busiest <= 5, f"at most 5 sent in any second, whichever manager sent them: {busiest}"
    assert sends[-1] - sends[0] >= timedelta(seconds=2), "16 at 5 a second take three windows at least"
    assert len(stack.invocations("it_rated")) == 16


@pytest.mark.django_db(transaction=True)
def test_one_at_a_time_per_account_while_other_accounts_go_on(stack):
    _, agents = up(stack, managers=1)
    execution = services.start("it_limited_fan_out", {"op": "it_per_account", "n": 9, "agents": agents,
                                                      "seconds": 0.3, "accounts": ["acme", "globex", "initech"]})
    done = stack.wait_for_status(execution.pk, TERMINAL, timeout=90)
    assert done.status == "completed", describe_execution(execution.pk)
    steps = ended(execution)
    for account in ("acme", "globex", "initech"):
        mine = [(op.sending_at, op.succeeded_at) for op in steps if op.kwargs["account"] == account]
        assert most_at_once(mine) == 1, (account, describe_execution(execution.pk))
    assert most_at_once([(op.sending_at, op.succeeded_at) for op in steps]) >= 2, "accounts do not wait for each other"
