"""Pause and unpause with real processes: a step that runs through a pause ends and is stored,
nothing new is sent while the execution is paused — not by the manager that carries it, nor by a
manager started while it is paused —, and unpausing carries it on to its end, each step run once.
The engine's side (retries, timers, events, limits) is in tests/engine/test_pause.py."""

import time

import pytest
from django.core.management import call_command

from tests.integration.harness import assert_operation_events_consistent
from tests.integration.test_engine import finish, states, up
from workflows_app import services
from workflows_app.models import Event, Execution

pytestmark = [pytest.mark.integration]


@pytest.mark.django_db(transaction=True)
def test_a_paused_execution_stores_what_runs_sends_nothing_new_even_after_a_manager_restart_and_ends_once_unpaused(stack):
    s = up(stack)
    execution = services.start("it_fan_in", {"agent": s.h1, "join_agent": s.h2, "members": 2, "seconds": 3.0})
    stack.wait_for_operation(execution.pk, "m0", "started")
    assert services.pause(execution.pk).status == "paused"

    stack.wait_for(lambda: set(states(execution).values()) == {"succeeded", "pending"}, 30,
                   "the running steps to end and be stored while paused")
    stack.kill(s.manager)
    stack.start_manager(concurrency=4, name="manager-2")
    time.sleep(3)  # the new manager carried on what it found: a paused execution is not among it
    assert Execution.objects.get(pk=execution.pk).status == "paused"
    assert states(execution) == {"m0": "succeeded", "m1": "succeeded", "join": "pending"}
    assert len(stack.invocations("join")) == 0

    call_command("unpause_execution", str(execution.pk))
    finish(stack, execution, "completed", timeout=60)
    assert [len(stack.invocations(tag)) for tag in ("m0", "m1", "join")] == [1, 1, 1]
    assert list(Event.objects.filter(execution_id=execution.pk, type__in=["workflow_paused", "workflow_unpaused"])
                .order_by("id").values_list("type", flat=True)) == ["workflow_paused", "workflow_unpaused"]
    assert_operation_events_consistent(execution)
