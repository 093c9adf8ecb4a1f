"""Agents are online while they heart-beat and offline after AGENT_OFFLINE_AFTER_SECONDS."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from agents.models import Agent, AgentStatus
from workflows_app.states import OperationState


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
