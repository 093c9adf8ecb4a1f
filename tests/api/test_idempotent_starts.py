"""``POST /api/v1/executions`` with an idempotency key (the header ``Idempotency-Key`` or the body's
``idempotency_key``): the same request again answers 200 with the execution the first started and
``Idempotent-Replayed: true``; another request with the key is 409 ``idempotency_conflict``; a key
that cannot be one is 400 ``invalid_parameters``; a key is its user's. Every answer is checked
against the published schema (``tests/api/conftest.py``)."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from tests.api.conftest import API, OPERATOR, CheckedClient, assert_error, make_user, openapi
from workflows_app.models import Execution, IdempotencyKey
from workflows_app.states import ExecutionStatus


def start(client, body, key=None):
    headers = {} if key is None else {"Idempotency-Key": key}
    return client.post(f"{API}/executions", body, format="json", headers=headers)


def test_the_same_request_with_the_same_header_key_answers_200_with_the_first_execution(api):
    first = start(api, {"workflow_id": "demo", "parameters": {"n": 2}}, key="order-1187")
    assert first.status_code == 201, first.content
    assert "Idempotent-Replayed" not in first
    again = start(api, {"workflow_id": "demo", "parameters": {"n": 2}}, key="order-1187")
    assert again.status_code == 200, again.content
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json(), "the same document"
    assert again["Location"] == first["Location"]
    assert Execution.objects.count() == 1


def test_a_replay_shows_the_execution_as_it_is_now(api):
    first = start(api, {"workflow_id": "demo"}, key="k").json()
    Execution.objects.filter(pk=first["id"]).update(status=ExecutionStatus.STARTED)  # set-up: a manager took it
    again = start(api, {"workflow_id": "demo"}, key="k")
    assert again.status_code == 200 and again.json()["status"] == "started"
    assert again.json() == api.get(f"{API}/executions/{first['id']}").json()


def test_the_key_may_be_given_in_the_body(api):
    first = start(api, {"workflow_id": "demo", "idempotency_key": "in-body"})
    assert first.status_code == 201, first.content
    assert IdempotencyKey.objects.get().key == "in-body"
    again = start(api, {"workflow_id": "demo", "idempotency_key": "in-body"})
    assert (again.status_code, again["Idempotent-Replayed"], again.json()["id"]) == (200, "true", first.json()["id"])
    # The header and the body are one key: either answers for the other.
    by_header = start(api, {"workflow_id": "demo"}, key="in-body")
    assert by_header.status_code == 200 and by_header.json()["id"] == first.json()["id"]
    both = start(api, {"workflow_id": "demo", "idempotency_key": "in-body"}, key="in-body")
    assert both.status_code == 200 and both.json()["id"] == first.json()["id"]
    assert Execution.objects.count() == 1


def test_another_request_with_the_key_is_409_idempotency_conflict_and_starts_nothing(api):
    first = start(api, {"workflow_id": "demo", "parameters": {"n": 2}}, key="order-1187").json()
    for body in ({"workflow_id": "demo", "parameters": {"n": 3}}, {"workflow_id": "demo", "parameters": {"n": 2},
                                                                     "dry_run": True}):
        refused = assert_error(start(api, body, key="order-1187"), 409, "idempotency_conflict")
        assert "'order-1187'" in refused["message"] and first["id"] in refused["message"]
    assert list(Execution.objects.values_list("pk", flat=True)) == [Execution.objects.get(pk=first["id"]).pk]


def test_without_a_key_the_same_request_starts_twice(api):
    assert start(api, {"workflow_id": "demo"}).status_code == 201
    assert start(api, {"workflow_id": "demo"}).status_code == 201
    assert Execution.objects.count() == 2 and not IdempotencyKey.objects.exists()


@pytest.mark.parametrize("key, says", [
    ("x" * 256, "at most 255 characters"),
    ("a\tb", "control characters"),
    ("", "may not be empty"),
])
def test_a_header_key_that_cannot_be_one_is_400_invalid_parameters(api, key, says):
    body = assert_error(start(api, {"workflow_id": "demo"}, key=key), 400, "invalid_parameters")
    assert "idempotency_key" in body["message"] and says in body["message"]
    assert not Execution.objects.exists()


@pytest.mark.parametrize("key, says", [
    ("x" * 256, "no more than 255 characters"),
    ("a\nb", "control characters"),
    ("a\u0085b", "control characters"),
    ("", "may not be blank"),
    (7, "Not a valid string"),
])
def test_a_body_key_that_cannot_be_one_is_400_invalid_parameters(api, key, says):
    body = assert_error(start(api, {"workflow_id": "demo", "idempotency_key": key}), 400, "invalid_parameters")
    assert "idempotency_key" in body["message"] and says in body["message"]
    assert not Execution.objects.exists()


def test_a_header_and_a_body_field_that_differ_are_400(api):
    body = assert_error(start(api, {"workflow_id": "demo", "idempotency_key": "a"}, key="b"), 400,
                        "invalid_parameters")
    assert "two different keys" in body["message"]
    assert not Execution.objects.exists()


def test_another_users_request_with_the_same_key_is_a_request_of_its_own(api, db):
    first = start(api, {"workflow_id": "demo", "parameters": {"n": 2}}, key="shared").json()
    other = CheckedClient()
    other.force_authenticate(make_user("bob", OPERATOR))
    # Another request with alice's key: no conflict, and nothing of alice's execution in the answer.
    theirs = start(other, {"workflow_id": "demo", "parameters": {"n": 5}}, key="shared")
    assert theirs.status_code == 201, theirs.content
    assert first["id"] not in theirs.content.decode() and "Idempotent-Replayed" not in theirs
    assert theirs.json()["created_by"] == "bob"
    # The same request as alice's: a start of bob's own, not alice's execution.
    same = start(other, {"workflow_id": "demo", "parameters": {"n": 2}}, key="shared")
    assert same.status_code == 409, "bob's key now names bob's own first request"
    assert first["id"] not in same.content.decode()
    assert Execution.objects.count() == 2
    # Each user's key answers its own execution.
    assert start(api, {"workflow_id": "demo", "parameters": {"n": 2}}, key="shared").json()["id"] == first["id"]
    assert start(other, {"workflow_id": "demo", "parameters": {"n": 5}}, key="shared").json()["id"] == (
        theirs.json()["id"])


def test_a_refused_start_stores_no_key(api):
    assert_error(start(api, {"workflow_id": "demo", "parameters": {"nope": 1}}, key="k"), 400, "invalid_parameters")
    assert not IdempotencyKey.objects.exists()
    assert start(api, {"workflow_id": "demo"}, key="k").status_code == 201


def test_a_replay_needs_the_permission_to_start(api, user):
    start(api, {"workflow_id": "demo"}, key="k")
    user.user_permissions.remove(Permission.objects.get(content_type__app_label="workflows_app",
                                                        codename="add_execution"))
    client = CheckedClient()
    client.force_authenticate(get_user_model().objects.get(pk=user.pk))  # its permissions read anew
    assert_error(start(client, {"workflow_id": "demo"}, key="k"), 403, "permission_denied")


@pytest.fixture
def rerun_workflows(settings):
    settings.SWITCHYARD_WORKFLOW_MODULES = ["tests.rerun_workflows"]


def test_a_rerun_with_a_key_is_started_once(api, rerun_workflows, switchyard, django_capture_on_commit_callbacks):
    original = switchyard.run("rr_canvas", {"second": 10})
    body = {"rerun_of": str(original.id), "from_step": "1:rr_add"}
    with django_capture_on_commit_callbacks(execute=True):
        first = start(api, body, key="rerun-1")
    assert first.status_code == 201, first.content
    again = start(api, body, key="rerun-1")
    assert (again.status_code, again["Idempotent-Replayed"]) == (200, "true")
    assert again.json()["id"] == first.json()["id"] and again.json()["rerun_of"] == str(original.id)
    assert_error(start(api, {**body, "from_step": "2:rr_add"}, key="rerun-1"), 409, "idempotency_conflict")
    assert Execution.objects.filter(rerun_of=original.id).count() == 1


def test_the_schema_documents_the_key_the_replay_and_the_conflict():
    operation = openapi()["paths"]["/api/v1/executions"]["post"]
    [header] = [p for p in operation["parameters"] if p["in"] == "header"]
    assert header["name"] == "Idempotency-Key" and header["schema"]["maxLength"] == 255
    assert "Idempotent-Replayed" in operation["responses"]["200"]["headers"]
    assert "idempotency_conflict" in operation["responses"]["409"]["description"]
    assert "idempotency_key" in openapi()["components"]["schemas"]["StartExecutionRequest"]["properties"]


@pytest.mark.parametrize("key", ["a\x00b", "\ud800", float("nan"), "k" * (3 * 1024 * 1024)])
def test_a_hostile_key_in_the_body_is_refused_and_starts_nothing(api, key):
    """A NUL, a lone surrogate, NaN, a 3 MB key: a clear refusal, never a 500; nothing stored."""
    import json

    body = json.dumps({"workflow_id": "demo", "idempotency_key": key}, allow_nan=True)
    answer = api.post(f"{API}/executions", body, content_type="application/json")
    assert answer.status_code in (400, 413), answer.content[:300]
    assert answer.json()["error_code"] in ("invalid_parameters", "parse_error", "payload_too_large")
    assert not Execution.objects.exists() and not IdempotencyKey.objects.exists()


def test_a_header_key_with_a_control_character_is_refused(api):
    answer = api.post(f"{API}/executions", {"workflow_id": "demo"}, format="json", HTTP_IDEMPOTENCY_KEY="a\tb")
    assert_error(answer, 400, "invalid_parameters")
    assert not Execution.objects.exists()
