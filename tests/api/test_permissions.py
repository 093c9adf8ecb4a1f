"""Who may do what through the API: every endpoint and every action, for each kind of
user — anonymous, logged in without a permission, a viewer (view_execution), an operator (view,
add, change), a forcer (an operator with force_execution) and a superuser — and a workflow
registered with a permission of its own, seen and steered only by those who hold it.

Every response goes through the schema check of ``CheckedClient`` (``conftest``): each 403 and
404 here is documented for its operation."""

import pytest
from django.contrib.auth import get_user_model

from tests.api.conftest import (
    API,
    FORCER,
    GUARDED,
    GUARDED_PERMISSION,
    OPERATOR,
    VIEWER,
    CheckedClient,
    assert_error,
    make_user,
    openapi,
)
from workflows_app.models import Event, Execution, Schedule, ScheduleSlot
from workflows_app.states import EventType, ExecutionStatus
from workflows_app.transitions import record_event

KINDS = ["anonymous", "nobody", "viewer", "operator", "forcer", "superuser"]
PERMISSIONS = {"nobody": (), "viewer": VIEWER, "operator": OPERATOR, "forcer": FORCER}
#: The kinds of user that hold each level.
MAY = {"view": {"viewer", "operator", "forcer", "superuser"},
       "change": {"operator", "forcer", "superuser"},
       "force": {"forcer", "superuser"}}

READS = ["/workflows", "/executions", "/executions/{id}", "/executions/{id}/operations", "/executions/{id}/graph",
         "/events", "/agents", "/schema", "/docs"]

#: Each write: (the level it needs, the permission a refusal names, the status of the execution
#: it is asked of, its answer when allowed).
WRITES = {
    "start": ("change", "workflows_app.add_execution", ExecutionStatus.STARTED, 201),
    "cancel": ("change", "workflows_app.change_execution", ExecutionStatus.STARTED, 200),
    "resume": ("change", "workflows_app.change_execution", ExecutionStatus.FAILED, 200),
    "send_event": ("change", "workflows_app.change_execution", ExecutionStatus.STARTED, 202),
    "force-cancel": ("force", "workflows_app.force_execution", ExecutionStatus.STARTED, 200),
    "kill": ("force", "workflows_app.force_execution", ExecutionStatus.STARTED, 200),
    "force-resume": ("force", "workflows_app.force_execution", ExecutionStatus.FAILED, 200),
}


@pytest.fixture
def client_of(db):
    """``client_of(kind, *more_permissions)``: a schema-checked client logged in as that kind of user."""

    def make(kind, *more):
        client = CheckedClient()
        if kind == "superuser":
            client.force_authenticate(get_user_model().objects.create_superuser("super"))
        elif kind != "anonymous":
            client.force_authenticate(make_user(kind, PERMISSIONS[kind] + more))
        return client

    return make


def write(client, name, execution, workflow_id="demo"):
    if name == "start":
        return client.post(f"{API}/executions", {"workflow_id": workflow_id}, format="json")
    if name == "send_event":
        return client.post(f"{API}/executions/{execution.pk}/events", {"name": "go"}, format="json")
    return client.post(f"{API}/executions/{execution.pk}", {"action": name}, format="json")


def stored():
    """Everything a write could change: each execution's status, and the events."""
    return sorted(Execution.objects.values_list("id", "status")), Event.objects.count()


def ids(response):
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_read_needs_the_view_permission(client_of, running, kind, path):
    response = client_of(kind).get(API + path.format(id=running.pk))
    if kind == "anonymous":
        assert response.status_code == 401
    elif kind in MAY["view"]:
        assert response.status_code == 200, response.content
    elif path == "/docs":  # an HTML page
        assert response.status_code == 403 and b"workflows_app.view_execution" in response.content
    else:
        body = assert_error(response, 403, "permission_denied")
        assert "workflows_app.view_execution" in body["message"]


@pytest.mark.parametrize("name", WRITES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_write_needs_its_permission_and_a_refused_one_changes_nothing(client_of, make_execution, kind, name):
    level, named, status, answer = WRITES[name]
    execution = make_execution(status=status, workflow_id="demo")
    before = stored()
    response = write(client_of(kind), name, execution)
    if kind == "anonymous":
        assert_error(response, 401, "not_authenticated")
    elif kind in MAY[level]:
        assert response.status_code == answer, response.content
        assert stored() != before
        return
    else:
        body = assert_error(response, 403, "permission_denied")
        assert named in body["message"], body
    assert stored() == before, "nothing changed"


@pytest.fixture
def two(make_execution, guarded):
    """A started execution of ``demo`` and one of the guarded workflow, each with an event."""
    plain, hidden = make_execution(workflow_id="demo"), make_execution(workflow_id=guarded)
    for execution in (plain, hidden):
        record_event(execution.pk, EventType.LOG, "hello")
    return plain, hidden


#: Who holds the guarded workflow's own permission, and whether they do.
HOLDERS = [("operator", False), ("forcer", False), ("operator", True), ("superuser", True)]


@pytest.mark.parametrize("kind, holds", HOLDERS)
def test_a_workflows_own_permission_decides_who_finds_and_steers_its_executions(client_of, two, kind, holds):
    plain, hidden = two
    client = client_of(kind, GUARDED_PERMISSION) if holds and kind != "superuser" else client_of(kind)
    shown = {str(plain.pk), str(hidden.pk)} if holds else {str(plain.pk)}
    assert set(ids(client.get(f"{API}/executions"))) == shown
    assert {row["execution_id"] for row in client.get(f"{API}/events").json()["results"]} == shown
    assert bool(ids(client.get(f"{API}/events", {"execution_id": str(hidden.pk)}))) == holds
    names = [row["name"] for row in client.get(f"{API}/workflows", {"limit": 1000}).json()["results"]]
    assert "demo" in names and (GUARDED in names) == holds
    before = stored()
    if not holds:
        for path in ["", "/operations", "/graph"]:
            assert_error(client.get(f"{API}/executions/{hidden.pk}{path}"), 404, "not_found")
        for name in ["cancel", "kill", "send_event"]:
            assert_error(write(client, name, hidden), 404, "not_found")
        body = assert_error(write(client, "start", None, GUARDED), 403, "permission_denied")
        assert GUARDED_PERMISSION in body["message"] and GUARDED in body["message"]
        assert stored() == before, "nothing changed"
        return
    for path in ["", "/operations", "/graph"]:
        assert client.get(f"{API}/executions/{hidden.pk}{path}").status_code == 200
    assert write(client, "send_event", hidden).status_code == 202
    assert write(client, "cancel", hidden).status_code == 200
    assert Execution.objects.get(pk=hidden.pk).status != ExecutionStatus.STARTED
    started = write(client, "start", None, GUARDED)
    assert started.status_code == 201 and started.json()["workflow_id"] == GUARDED


def test_a_viewer_with_the_workflows_own_permission_sees_its_executions_and_may_not_act(client_of, two):
    _, hidden = two
    client = client_of("viewer", GUARDED_PERMISSION)
    assert client.get(f"{API}/executions/{hidden.pk}").status_code == 200
    before = stored()
    body = assert_error(write(client, "cancel", hidden), 403, "permission_denied")
    assert "workflows_app.change_execution" in body["message"] and GUARDED_PERMISSION not in body["message"]
    assert stored() == before



#: A user who may start and act, not view: ``workflows_app.permissions`` lets it act, and an
#: answer that shows a document is a read.
CHANGER = ("add_execution", "change_execution")


def acknowledged(response, status, document_id=None):
    """The answer of a write to a user who may not view: that it was done, and the id, nothing of the document."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"id", "message"}, body
    assert "workflows_app.view_execution" in body["message"]
    if document_id is not None:
        assert body["id"] == str(document_id)
    return body


def test_who_may_act_but_not_view_acts_and_is_shown_nothing_of_the_execution(client_of, make_execution):
    execution = make_execution(status=ExecutionStatus.STARTED, workflow_id="demo", parameters={"secret": "s3"})
    changer = client_of("nobody", *CHANGER)
    body = acknowledged(write(changer, "send_event", execution), 202)
    assert Event.objects.filter(pk=int(body["id"]), execution=execution).exists()
    acknowledged(write(changer, "cancel", execution), 200, execution.pk)
    assert Execution.objects.get(pk=execution.pk).status != ExecutionStatus.STARTED, "the action was done"
    started = write(changer, "start", None)
    body = acknowledged(started, 201)
    assert Execution.objects.filter(pk=body["id"], workflow_id="demo").exists()
    assert started["Location"].endswith(f"/executions/{body['id']}")
    assert_error(changer.get(f"{API}/executions/{execution.pk}"), 403, "permission_denied")
    # Who may view is shown the document, as before.
    operator = client_of("operator")
    shown = write(operator, "resume", Execution.objects.get(pk=execution.pk)).json()
    assert shown["id"] == str(execution.pk) and shown["parameters"] == {"secret": "s3"}


def test_who_may_act_but_not_view_changes_a_schedule_and_is_shown_nothing_of_it(client_of):
    changer = client_of("nobody", *CHANGER)
    created = changer.post(f"{API}/schedules", {"workflow_id": "demo", "parameters": {"n": 7}, "cron": "0 3 * * *"},
                           format="json")
    schedule_id = acknowledged(created, 201)["id"]
    assert Schedule.objects.filter(pk=schedule_id, workflow_id="demo").exists()
    acknowledged(changer.patch(f"{API}/schedules/{schedule_id}", {"jitter": 5}, format="json"), 200, schedule_id)
    for action in ["pause", "resume", "trigger"]:
        acknowledged(changer.post(f"{API}/schedules/{schedule_id}", {"action": action}, format="json"), 200,
                     schedule_id)
    schedule = Schedule.objects.get(pk=schedule_id)
    assert schedule.jitter == 5 and not schedule.paused and ScheduleSlot.objects.filter(schedule=schedule).exists()
    assert_error(changer.get(f"{API}/schedules/{schedule_id}"), 403, "permission_denied")
    shown = client_of("operator").patch(f"{API}/schedules/{schedule_id}", {"jitter": 6}, format="json").json()
    assert shown["id"] == schedule_id and shown["parameters"] == {"n": 7}


def test_the_schema_documents_the_acknowledgement_of_every_write():
    schema = openapi()
    assert set(schema["components"]["schemas"]["Acknowledgement"]["required"]) == {"id", "message"}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for code, response in operation["responses"].items():
                if code.startswith("2") and "application/json" in response.get("content", {}):
                    members = response["content"]["application/json"]["schema"].get("anyOf", [])
                    assert ({"$ref": "#/components/schemas/Acknowledgement"} in members) == (method != "get"), (
                        method, path, code)
