"""Agents are online while they heart-beat and offline after AGENT_OFFLINE_AFTER_SECONDS; deleting
an agent's row never hides its death."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent, AgentStatus
from workflows_app.models import Event, Operation
from workflows_app.states import EventType, OperationState


@pytest.mark.django_db
@override_settings(WORKFLOWS={"AGENT_OFFLINE_AFTER_SECONDS": 60})
def test_status_follows_the_last_heartbeat_and_running_counts_started_operations(make_operation):
    now = timezone.now()
    Agent.objects.create(name="fresh", last_heartbeat=now - timedelta(seconds=5))
    Agent.objects.create(name="silent", last_heartbeat=now - timedelta(seconds=61))
    Agent.objects.create(name="never")
    for state in [OperationState.STARTED, OperationState.STARTED, OperationState.SENT]:
        make_operation(state=state, agent="fresh")
    make_operation(state=OperationState.STARTED, agent="silent")

    agents = {a.name: a for a in Agent.objects.with_status()}
    assert {n: (a.live_status, a.running) for n, a in agents.items()} == {
        "fresh": ("online", 2), "silent": ("offline", 1), "never": ("offline", 0),
    }
    assert {n: a.status for n, a in agents.items()} == {
        "fresh": AgentStatus.ONLINE, "silent": AgentStatus.OFFLINE, "never": AgentStatus.OFFLINE,
    }
    assert set(Agent.objects.online().values_list("name", flat=True)) == {"fresh"}
    assert set(Agent.objects.offline().values_list("name", flat=True)) == {"silent", "never"}


def _delete_in_the_admin(client, agent):
    response = client.post(reverse("admin:agents_agent_delete", args=[agent.pk]), {"post": "yes"})
    assert response.status_code == 302, response.content.decode()[:2000]


def _delete_a_queryset(client, agent):
    silent = Agent.objects.filter(last_heartbeat__lt=timezone.now() - timedelta(minutes=5))  # clearing out the silent
    assert silent.delete()[1] == {"agents.Agent": 1}


@pytest.mark.django_db
@pytest.mark.parametrize("delete", [_delete_in_the_admin, _delete_a_queryset], ids=["admin", "queryset"])
def test_deleting_an_agent_makes_its_started_operations_lost_first(delete, admin_client, make_execution, make_operation,
                                                                   outbox):
    """An agent's row deleted — say a silent agent an operator clears out — would have
    left its started operations ``started`` for ever (the offline sweep only judges agents it has
    a row of). They fail as lost first, retryably, as when the agent goes offline."""
    gone = Agent.objects.create(name="gone-1", last_heartbeat=timezone.now() - timedelta(hours=1))
    Agent.objects.create(name="other", last_heartbeat=timezone.now())
    execution = make_execution()
    lost = make_operation(OperationState.STARTED, execution, name="lost", agent="gone-1", attempt=2, max_retries=3)
    last_try = make_operation(OperationState.STARTED, execution, name="last", agent="gone-1", attempt=1, max_retries=0)
    elsewhere = make_operation(OperationState.STARTED, execution, name="elsewhere", agent="other", attempt=1)
    waiting = make_operation(OperationState.SENT, execution, name="waiting", agent="gone-1", attempt=1)

    delete(admin_client, gone)

    assert not Agent.objects.filter(name="gone-1").exists()
    states = dict(Operation.objects.filter(execution=execution).values_list("name", "state"))
    assert states == {"lost": "rescheduled", "last": "failed", "elsewhere": "started", "waiting": "sent"}
    for operation in (lost, last_try):
        operation.refresh_from_db()
        assert operation.error["type"] == "WorkerLost" and operation.error["message"] == "agent gone-1 was deleted"
        event = Event.objects.get(execution=execution, operation=operation.name, data__from="started")
        assert event.type == (EventType.TASK_RESCHEDULED if operation.name == "lost" else EventType.TASK_FAILED)
        assert event.data["attempt"] == operation.attempt and event.message == "agent gone-1 was deleted"
    assert Operation.objects.get(pk=lost.pk).current_retries == 1
    assert Operation.objects.get(pk=elsewhere.pk).error is None and Operation.objects.get(pk=waiting.pk).error is None
