"""POST /api/v1/executions: starting an execution through the API."""

import pytest

from tests import task_functions  # noqa: F401  (its tasks are ones this process made: django_task starts them)
from tests.api.conftest import API, assert_error
from workflows_app.models import Event, Execution
from workflows_app.states import ExecutionStatus

EXECUTION_FIELDS = {"id", "workflow_id", "deployment_id", "parameters", "status", "failure_mode", "timeout",
                    "wait_after_fail", "payload", "error", "is_dry_run", "created_by", "created_at", "started_at",
                    "ended_at", "parent", "parent_step", "rerun_of", "rerun_from", "schedule", "scheduled_for",
                    "concurrency_key", "run_after", "priority", "operations_summary", "warnings"}


def start(client, **body):
    return client.post(f"{API}/executions", body, format="json")


def test_start_creates_a_pending_execution_and_answers_201_with_it(api, user):
    response = start(api, workflow_id="demo", parameters={"n": 2})
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == EXECUTION_FIELDS
    stored = Execution.objects.get(pk=body["id"])
    assert (stored.workflow_id, stored.parameters, stored.status, stored.created_by) == (
        "demo", {"n": 2}, ExecutionStatus.PENDING, "alice")
    assert body["status"] == "pending" and body["parameters"] == {"n": 2} and body["created_by"] == "alice"
    assert body["payload"] == {} and body["error"] == "" and body["started_at"] is None
    assert body["operations_summary"] == dict.fromkeys(
        ["pending", "sending", "sent", "started", "rescheduled", "succeeded", "failed", "cancelled"], 0)
    assert response["Location"].endswith(f"/api/v1/executions/{stored.pk}")


def test_start_takes_every_option_of_the_contract(api):
    response = start(api, workflow_id="demo", parameters={}, deployment_id="dep-1", failure_mode="fail_fast",
                     timeout=30, wait_after_fail=2.5, dry_run=True)
    assert response.status_code == 201, response.content
    stored = Execution.objects.get(pk=response.json()["id"])
    assert (stored.deployment_id, stored.failure_mode, stored.timeout, stored.wait_after_fail, stored.is_dry_run) == (
        "dep-1", "fail_fast", 30, 2.5, True)


def test_start_sends_the_execution_to_a_manager_once_committed(api, advances, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = start(api, workflow_id="demo")
    assert response.status_code == 201
    assert len(callbacks) == 1 and advances == [response.json()["id"]]


def test_optional_fields_given_as_null_take_their_defaults(api):
    response = start(api, workflow_id="demo", parameters=None, deployment_id=None, failure_mode=None, timeout=None,
                     wait_after_fail=None)
    assert response.status_code == 201, response.content
    assert response.json()["failure_mode"] == "no_new_calls" and response.json()["wait_after_fail"] == 600


@pytest.mark.parametrize("workflow_id", ["nope", "", "Demo", "demo "])
def test_a_string_naming_no_workflow_is_unknown_workflow(api, workflow_id):
    body = assert_error(start(api, workflow_id=workflow_id), 400, "unknown_workflow")
    assert repr(workflow_id) in body["message"]
    assert not Execution.objects.exists()


def test_an_unknown_workflow_says_where_workflows_come_from(api, settings, monkeypatch):
    """A project whose SWITCHYARD_WORKFLOW_MODULES is missing or empty is told so in the answer."""
    monkeypatch.delenv("SWITCHYARD_WORKFLOW_MODULES", raising=False)
    settings.SWITCHYARD_WORKFLOW_MODULES = []
    body = assert_error(start(api, workflow_id="fulfil"), 400, "unknown_workflow")
    assert body["message"] == ("no workflow named 'fulfil' is registered (SWITCHYARD_WORKFLOW_MODULES names no module: "
                               "set it to the modules that define your workflows and operations, such as "
                               "[\"shop.workflows\"])")
    settings.SWITCHYARD_WORKFLOW_MODULES = ["workflows_app.examples"]
    body = assert_error(start(api, workflow_id="fulfil"), 400, "unknown_workflow")
    assert body["message"].endswith("(the modules loaded from SWITCHYARD_WORKFLOW_MODULES are workflows_app.examples)")


@pytest.mark.parametrize("body, field", [
    ({}, "workflow_id"),
    ({"workflow_id": 7}, "workflow_id"),
    ({"workflow_id": None}, "workflow_id"),
    ({"workflow_id": ["demo"]}, "workflow_id"),
    ({"workflow_id": "demo", "parameters": []}, "parameters"),
    ({"workflow_id": "demo", "parameters": "n=1"}, "parameters"),
    ({"workflow_id": "demo", "deployment_id": 5}, "deployment_id"),
    ({"workflow_id": "demo", "deployment_id": ""}, "deployment_id"),
    ({"workflow_id": "demo", "deployment_id": "d" * 201}, "deployment_id"),
    ({"workflow_id": "demo", "failure_mode": "sometimes"}, "failure_mode"),
    ({"workflow_id": "demo", "failure_mode": 1}, "failure_mode"),
    ({"workflow_id": "demo", "timeout": "10"}, "timeout"),
    ({"workflow_id": "demo", "timeout": True}, "timeout"),
    ({"workflow_id": "demo", "timeout": -1}, "timeout"),
    ({"workflow_id": "demo", "timeout": 10**30}, "timeout"),
    ({"workflow_id": "demo", "timeout": 10**400}, "timeout"),
    ({"workflow_id": "demo", "wait_after_fail": "soon"}, "wait_after_fail"),
    ({"workflow_id": "demo", "dry_run": "true"}, "dry_run"),
    ({"workflow_id": "demo", "dry_run": 1}, "dry_run"),
    ({"workflow_id": "demo", "queue": None}, "queue"),
    ({"workflow_id": "demo", "force": "yes"}, "force"),
    ({"workflow_id": "demo", "dry-run": True}, "dry-run"),
])
def test_a_wrong_type_or_a_missing_workflow_id_is_invalid_parameters(api, body, field):
    response = api.post(f"{API}/executions", body, format="json")
    assert field in assert_error(response, 400, "invalid_parameters")["message"]
    assert not Execution.objects.exists()


@pytest.mark.parametrize("parameters, problem", [
    ({"n": 1, "colour": "red"}, "unknown parameter(s): colour"),
    ({"x": 1}, "unknown parameter(s): x"),
])
def test_parameters_the_workflow_does_not_take_are_invalid_parameters(api, parameters, problem):
    body = assert_error(start(api, workflow_id="demo", parameters=parameters), 400, "invalid_parameters")
    assert problem in body["message"]
    assert not Execution.objects.exists()


def test_a_missing_required_workflow_parameter_is_invalid_parameters(api, monkeypatch):
    from workflows_app import registry

    def needs_size(ctx, size, colour="red"):
        pass

    monkeypatch.setitem(registry._workflows, "sized", registry.WorkflowDef(name="sized", func=needs_size))
    body = assert_error(start(api, workflow_id="sized", parameters={"colour": "blue"}), 400, "invalid_parameters")
    assert "missing required parameter(s): size" in body["message"]
    assert start(api, workflow_id="sized", parameters={"size": 3}).status_code == 201


@pytest.mark.parametrize("value", ["a\x00b", {"k": "a\x00"}, {"a\x00": 1}, [[["\x00"]]]])
def test_nul_characters_anywhere_in_the_parameters_are_refused(api, value):
    body = assert_error(start(api, workflow_id="demo", parameters={"agent": value}), 400, "invalid_parameters")
    assert "null characters" in body["message"].lower()


def test_nul_characters_in_a_string_field_are_refused(api):
    assert_error(start(api, workflow_id="demo", deployment_id="d\x00"), 400, "invalid_parameters")
    assert_error(start(api, workflow_id="de\x00mo"), 400, "invalid_parameters")


def test_parameters_nested_too_deeply_are_refused_and_large_integers_are_kept(api):
    deep = "leaf"
    for _ in range(100):
        deep = [deep]
    assert_error(start(api, workflow_id="demo", parameters={"agent": deep}), 400, "invalid_parameters")
    response = start(api, workflow_id="demo", parameters={"n": 2**70})
    assert response.status_code == 201 and response.json()["parameters"] == {"n": 2**70}
    assert Execution.objects.get(pk=response.json()["id"]).parameters == {"n": 2**70}


# --- one active execution per deployment ------------------------------------------------------

def test_a_deployment_with_an_active_execution_refuses_another(api, make_execution):
    active = make_execution(status=ExecutionStatus.STARTED, deployment_id="dep")
    body = assert_error(start(api, workflow_id="demo", deployment_id="dep"), 400, "existing_running_execution")
    assert str(active.pk) in body["message"]
    assert list(Execution.objects.values_list("pk", flat=True)) == [active.pk], "the refused one is rolled back"


def test_with_queue_it_waits_queued_behind_the_active_one(api, make_execution):
    active = make_execution(status=ExecutionStatus.STARTED, deployment_id="dep")
    response = start(api, workflow_id="demo", deployment_id="dep", queue=True)
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "queued"
    assert Execution.objects.get(pk=response.json()["id"]).status == ExecutionStatus.QUEUED
    assert Execution.objects.get(pk=active.pk).status == ExecutionStatus.STARTED


def test_with_force_it_runs_beside_the_active_one(api, make_execution):
    make_execution(status=ExecutionStatus.STARTED, deployment_id="dep")
    response = start(api, workflow_id="demo", deployment_id="dep", force=True)
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "pending"
    assert Execution.objects.filter(deployment_id="dep").count() == 2


def test_an_ended_execution_does_not_hold_its_deployment(api, make_execution):
    make_execution(status=ExecutionStatus.COMPLETED, deployment_id="dep")
    response = start(api, workflow_id="demo", deployment_id="dep")
    assert response.status_code == 201 and response.json()["status"] == "pending"


def test_the_start_is_recorded_as_an_event(api):
    response = start(api, workflow_id="demo", parameters={"n": 1})
    event = Event.objects.get(execution_id=response.json()["id"])
    assert event.message == "created: demo" and event.data == {"parameters": {"n": 1}}


@pytest.mark.parametrize("queue_name", ["celery.pidbox", "amq.gen-1", "management.reporting", "host-1@box"])
def test_a_task_started_for_a_queue_no_agent_can_have_is_invalid_parameters(api, queue_name):
    """A task of Django's Tasks framework is started from the API with its queue as a parameter
    (``workflows_app.task_runs``): the queue names the agent its step is sent to."""
    body = assert_error(start(api, workflow_id="django_task",
                              parameters={"task": "tests.task_functions.add", "args": [1], "queue_name": queue_name}),
                        400, "invalid_parameters")
    assert body["message"].startswith(f"parameter 'queue_name': invalid agent name {queue_name!r}: ")
    assert not Execution.objects.exists()
    assert start(api, workflow_id="django_task", parameters={"task": "tests.task_functions.add", "args": [1],
                                                              "queue_name": "host-1"}).status_code == 201
