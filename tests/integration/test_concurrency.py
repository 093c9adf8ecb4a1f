"""Concurrency limits with real managers and an agent: never more than the limit of a key run at
once, they start in the order they were created, another key is not held up, and a limit raised by
a deploy (a manager restarted with the new code) starts the waiting ones.

Each execution runs one step that sleeps on the agent; what is checked is read from the stored
``started_at`` and ``ended_at`` of the executions, and from their events. The manager and the agent have more worker
processes than the limit: only the limit keeps them from running more at once.
"""

import pytest
from django.test import override_settings

from tests import concurrency_workflows
from tests.concurrency_workflows import LIMIT_ENV
from tests.integration.harness import WORKFLOW_MODULES, describe_execution
from workflows_app import registry, services
from workflows_app.models import Event, Execution
from workflows_app.states import EXECUTION_TERMINAL

MODULES = [WORKFLOW_MODULES, "tests.concurrency_workflows"]
TERMINAL = [status.value for status in EXECUTION_TERMINAL]


@pytest.fixture
def limited(stack, monkeypatch):
    """The stack's processes and this one load the limited workflows; ``start_manager(limit)``
    starts a manager whose code has that limit (this process's registration is set to match),
    and waits for the agent (which reaches the database through a manager)."""
    monkeypatch.setitem(registry._workflows, "cc_per_customer", registry._workflows["cc_per_customer"])
    agent = stack.agent_name("cc-agent")
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=MODULES):
        stack.start_agent(agent, concurrency=4)

        def start_manager(limit):
            concurrency_workflows.register(limit)
            manager = stack.manage("manager", "run_manager", "--concurrency", "4", "--loglevel", "INFO",
                                   env={"SWITCHYARD_WORKFLOW_MODULES": ",".join(MODULES), LIMIT_ENV: str(limit)})
            stack.wait_for_agent(agent)
            return manager

        yield agent, start_manager


def finished(stack, executions, timeout=60):
    ended = [stack.wait_for_status(e.pk, TERMINAL, timeout=timeout) for e in executions]
    for execution in ended:
        assert execution.status == "completed", describe_execution(execution.pk)
    return ended


def most_at_once(executions) -> int:
    """The most of ``executions`` that were running at the same moment (from their stored times)."""
    moments = sorted([(e.started_at, 1) for e in executions] + [(e.ended_at, -1) for e in executions],
                     key=lambda moment: (moment[0], moment[1]))  # an end before a start at the same instant
    running = most = 0
    for _, step in moments:
        running += step
        most = max(most, running)
    return most


def test_at_most_the_limit_run_at_once_in_the_order_they_were_created_and_other_keys_run_beside(stack, limited):
    agent, start_manager = limited
    start_manager(2)
    acme = [services.start("cc_per_customer", {"customer": "acme", "agent": agent, "seconds": 1.0})
            for _ in range(6)]
    globex = services.start("cc_per_customer", {"customer": "globex", "agent": agent, "seconds": 1.0})
    assert [e.status for e in acme] == ["pending"] * 2 + ["queued"] * 4 and globex.status == "pending"

    acme, (globex,) = finished(stack, acme), finished(stack, [globex])
    assert most_at_once(acme) == 2, [(e.started_at, e.ended_at) for e in acme]
    # Admitted in the order they were created (two admitted at the same moment may reach their
    # dispatchers in either order, so the order of started_at is not the engine's to give).
    admitted = Event.objects.filter(execution_id__in=[e.pk for e in acme], message__startswith="a slot of")
    assert list(admitted.order_by("id").values_list("execution_id", flat=True)) == [e.pk for e in acme[2:]]
    assert globex.started_at < acme[2].started_at, "another customer does not wait for acme's slots"


def test_a_limit_raised_by_a_deploy_starts_the_waiting_executions(stack, limited):
    agent, start_manager = limited
    manager = start_manager(1)
    first = services.start("cc_per_customer", {"customer": "initech", "agent": agent, "seconds": 4.0})
    stack.wait_for_status(first.pk, "started")
    waiting = [services.start("cc_per_customer", {"customer": "initech", "agent": agent, "seconds": 1.5})
               for _ in range(3)]
    assert [e.status for e in waiting] == ["queued"] * 3

    stack.stop(manager)  # the deploy: the code now says 3
    start_manager(3)
    assert Execution.objects.get(pk=first.pk).status == "started", "the deploy came before the first ended"
    first, *waiting = finished(stack, [first, *waiting])
    assert all(e.started_at >= first.ended_at for e in waiting), "at most 1 while the limit was 1"
    assert most_at_once(waiting) == 3, [(e.started_at, e.ended_at) for e in waiting]
