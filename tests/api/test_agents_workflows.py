"""GET /api/v1/agents and GET /api/v1/workflows."""

from datetime import timedelta

from django.test import override_settings
from django.utils import timezone

from agents.models import Agent
from tests.api.conftest import API
from workflows_app import queries, registry
from workflows_app.states import OperationState


@override_settings(WORKFLOWS={"AGENT_OFFLINE_AFTER_SECONDS": 60})
def test_agents_are_online_while_they_heart_beat_and_count_their_started_operations(api, make_operation):
    now = timezone.now()
    Agent.objects.create(name="fresh", hostname="h1", last_heartbeat=now - timedelta(seconds=5))
    Agent.objects.create(name="silent", hostname="h2", last_heartbeat=now - timedelta(seconds=61))
    Agent.objects.create(name="never")
    for state in [OperationState.STARTED, OperationState.STARTED, OperationState.SENT]:
        make_operation(state, agent="fresh")
    make_operation(OperationState.STARTED, agent="silent")

    response = api.get(f"{API}/agents")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    rows = {row["name"]: row for row in body["results"]}
    assert [row["name"] for row in body["results"]] == ["fresh", "never", "silent"]
    assert {n: (r["status"], r["running"], r["hostname"]) for n, r in rows.items()} == {
        "fresh": ("online", 2, "h1"), "silent": ("offline", 1, "h2"), "never": ("offline", 0, "")}
    assert rows["never"]["last_heartbeat"] is None and rows["fresh"]["last_heartbeat"].endswith("Z")
    assert set(rows["fresh"]) == {"name", "status", "last_heartbeat", "hostname", "running"}


@override_settings(WORKFLOWS={"AGENT_OFFLINE_AFTER_SECONDS": 60})
def test_an_agent_goes_offline_as_time_passes_without_a_heartbeat(api, db):
    Agent.objects.create(name="a", last_heartbeat=timezone.now())
    assert api.get(f"{API}/agents").json()["results"][0]["status"] == "online"
    Agent.objects.update(last_heartbeat=timezone.now() - timedelta(seconds=120))
    assert api.get(f"{API}/agents").json()["results"][0]["status"] == "offline"


def test_workflows_lists_the_registered_workflows_with_their_parameters(api, monkeypatch):
    def needs(ctx, size, colour="red", *rest, when=None, **more):
        pass

    monkeypatch.setitem(registry._workflows, "needs", registry.WorkflowDef(
        name="needs", func=needs, failure_mode="fail_fast", timeout=30))
    response = api.get(f"{API}/workflows", {"limit": 1000})
    assert response.status_code == 200
    rows = {row["name"]: row for row in response.json()["results"]}
    limits = queries.operation_limits()
    assert all(row["operation_limits"] == limits for row in rows.values())
    assert rows["demo"] == {"name": "demo", "failure_mode": "no_new_calls", "timeout": None, "concurrency": None,
                            "concurrency_key": None, "operation_limits": limits, "paused": False, "parameters": [
        {"name": "n", "required": False, "default": 3}, {"name": "agent", "required": False, "default": "local"}],
        "schema": {"type": "object", "properties": {"n": {"default": 3}, "agent": {"default": "local"}},
                   "additionalProperties": False}}
    assert rows["needs"] == {"name": "needs", "failure_mode": "fail_fast", "timeout": 30, "concurrency": None,
                             "concurrency_key": None, "operation_limits": limits, "paused": False, "parameters": [
        {"name": "size", "required": True, "default": None}, {"name": "colour", "required": False, "default": "red"},
        {"name": "when", "required": False, "default": None}],
        "schema": {"type": "object", "properties": {"size": {}, "colour": {"default": "red"}, "when": {"default": None}},
                   "required": ["size"], "additionalProperties": True}}
    assert response.json()["count"] == len(registry.workflows())
    assert [row["name"] for row in response.json()["results"]] == sorted(rows)


def test_a_default_that_is_not_json_is_shown_as_its_repr(api, monkeypatch):
    marker = object()

    def odd(ctx, thing=marker, many=(1, 2)):
        pass

    monkeypatch.setitem(registry._workflows, "odd", registry.WorkflowDef(name="odd", func=odd))
    rows = {row["name"]: row for row in api.get(f"{API}/workflows", {"limit": 1000}).json()["results"]}
    assert rows["odd"]["parameters"] == [{"name": "thing", "required": False, "default": repr(marker)},
                                         {"name": "many", "required": False, "default": [1, 2]}]


def test_workflows_are_paginated(api, monkeypatch):
    for name in ["w1", "w2", "w3"]:
        monkeypatch.setitem(registry._workflows, name, registry.WorkflowDef(name=name, func=lambda ctx: None))
    body = api.get(f"{API}/workflows", {"limit": 2, "offset": 1}).json()
    assert body["count"] == len(registry.workflows()) and len(body["results"]) == 2 and body["previous"]
