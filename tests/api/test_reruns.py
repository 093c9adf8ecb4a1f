"""``POST /executions`` with ``rerun_of`` and ``from_step``, and ``GET /executions?rerun_of=``."""

import pytest

from tests import UNKNOWN_ID
from tests.api.conftest import (API, GUARDED, GUARDED_PERMISSION, OPERATOR, VIEWER, CheckedClient, assert_error,
                               make_user)
from workflows_app.models import Execution
from workflows_app.testing.harness import Result


@pytest.fixture(autouse=True)
def with_the_rerun_workflows(settings):
    settings.SWITCHYARD_WORKFLOW_MODULES = ["tests.rerun_workflows"]


@pytest.fixture
def first(switchyard):
    return switchyard.run("rr_canvas", {"second": 10})


def rerun(api, django_capture_on_commit_callbacks, body):
    # The advance a start sends once committed goes to the harness (the test never commits).
    with django_capture_on_commit_callbacks(execute=True):
        return api.post(f"{API}/executions", body, format="json")


def test_a_rerun_starts_the_original_workflow_from_the_step_and_the_document_links_them(
        api, switchyard, first, django_capture_on_commit_callbacks):
    response = rerun(api, django_capture_on_commit_callbacks,
                     {"rerun_of": str(first.id), "from_step": "1:rr_add", "parameters": {"second": 20}})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["workflow_id"], body["rerun_of"], body["rerun_from"]) == ("rr_canvas", str(first.id), "1:rr_add")
    assert body["parameters"] == {"second": 20}
    assert body["created_by"] == "alice"

    done = switchyard.finish(Result(body["id"]))
    assert done.status == "completed" and done.payload == {"sum": 123}
    assert {name: op.attempt for name, op in done.operations.items()} == {"0:rr_add": 0, "1:rr_add": 1, "2:rr_add": 1}

    page = api.get(f"{API}/executions/{body['id']}").json()
    assert page["rerun_of"] == str(first.id) and page["rerun_from"] == "1:rr_add"
    listed = api.get(f"{API}/executions", {"rerun_of": str(first.id)}).json()["results"]
    assert [row["id"] for row in listed] == [body["id"]]
    assert api.get(f"{API}/executions", {"rerun_of": body["id"]}).json()["results"] == []


def test_a_rerun_takes_the_originals_parameters_and_options_unless_given(
        api, switchyard, first, django_capture_on_commit_callbacks):
    body = rerun(api, django_capture_on_commit_callbacks,
                 {"rerun_of": str(first.id), "from_step": "2:rr_add", "timeout": 30}).json()
    assert body["parameters"] == {"second": 10}
    assert body["timeout"] == 30 and first.execution.timeout is None


@pytest.mark.parametrize("body, message", [
    ({"from_step": "0:rr_add"}, "rerun_of"),
    ({"rerun_of": "FIRST"}, "from_step"),
    ({"rerun_of": "FIRST", "from_step": "nope"}, "no step 'nope'"),
    ({"rerun_of": "00000000-0000-0000-0000-000000000000", "from_step": "0:rr_add"}, "rerun_of: no execution"),
    ({"rerun_of": "not-an-id", "from_step": "0:rr_add"}, "rerun_of"),
    ({"rerun_of": "FIRST", "from_step": "0:rr_add", "workflow_id": "rr_graph"}, "a rerun runs the original's workflow"),
    ({"rerun_of": "FIRST", "from_step": "0:rr_add", "parameters": {"second": "ten"}}, "parameter 'second'"),
])
def test_a_rerun_that_cannot_be_is_refused_and_nothing_is_stored(api, first, body, message):
    body = {key: str(first.id) if value == "FIRST" else value for key, value in body.items()}
    response = api.post(f"{API}/executions", body, format="json")
    assert_error(response, 400, "invalid_parameters")
    assert message in response.json()["message"]
    assert Execution.objects.count() == 1


def test_a_user_who_may_only_view_may_not_rerun(first, switchyard):
    client = CheckedClient()
    client.force_authenticate(make_user("viewer", VIEWER))
    response = client.post(f"{API}/executions", {"rerun_of": str(first.id), "from_step": "0:rr_add"}, format="json")
    assert_error(response, 403, "permission_denied")
    assert Execution.objects.count() == 1


@pytest.mark.parametrize("raw, status, error_code", [
    ('{"rerun_of": "FIRST", "from_step": "a\\u0000b"}', 400, "invalid_parameters"),
    ('{"rerun_of": "FIRST", "from_step": "a\\ud800b"}', 400, "invalid_parameters"),
    ('{"rerun_of": "FIRST", "from_step": "0:rr_add", "parameters": {"second": NaN}}', 400, "parse_error"),
    ('{"rerun_of": "FIRST", "from_step": "' + "x" * (3 * 1024 * 1024) + '"}', 413, "payload_too_large"),
    ('{"rerun_of": "FIRST", "from_step": "0:rr_add", "parameters": {"second": 1, "pad": "' + "x" * (3 * 1024 * 1024)
     + '"}}', 413, "payload_too_large"),
])
def test_a_rerun_with_a_value_that_cannot_be_stored_is_refused_and_nothing_is_stored(api, first, raw, status, error_code):
    response = api.post(f"{API}/executions", raw.replace("FIRST", str(first.id)), content_type="application/json")
    assert response.status_code == status, response.content
    if error_code:
        assert response.json()["error_code"] == error_code
    assert Execution.objects.count() == 1


def test_who_may_not_view_the_original_may_not_rerun_it(first, switchyard):
    client = CheckedClient()
    client.force_authenticate(make_user("starter", ("add_execution",)))
    response = client.post(f"{API}/executions", {"rerun_of": str(first.id), "from_step": "0:rr_add"}, format="json")
    body = assert_error(response, 403, "permission_denied")
    assert "workflows_app.view_execution" in body["message"] and str(first.id) not in body["message"]
    assert Execution.objects.count() == 1


@pytest.mark.parametrize("holds", [False, True])
def test_a_rerun_of_an_execution_hidden_from_the_user_is_answered_as_one_that_does_not_exist(
        make_execution, guarded, holds):
    """Every door answers an execution of a workflow whose own permission the user lacks as not
    found: a rerun too, without a 403 that would say it exists."""
    hidden = make_execution(workflow_id=guarded)
    client = CheckedClient()
    client.force_authenticate(make_user("operator", OPERATOR + ((GUARDED_PERMISSION,) if holds else ())))

    def rerun_of(execution_id):
        return client.post(f"{API}/executions", {"rerun_of": execution_id, "from_step": "0:step"}, format="json")

    response = rerun_of(str(hidden.pk))
    if holds:  # found: refused for the step it does not have, not for the execution
        assert "no step '0:step'" in assert_error(response, 400, "invalid_parameters")["message"]
    else:
        absent = rerun_of(UNKNOWN_ID)
        body = assert_error(response, 400, "invalid_parameters")
        assert body == {**absent.json(), "message": absent.json()["message"].replace(UNKNOWN_ID, str(hidden.pk))}
        assert GUARDED_PERMISSION not in body["message"] and GUARDED not in body["message"]
        assert_error(client.get(f"{API}/executions/{hidden.pk}"), 404, "not_found")
    assert list(Execution.objects.values_list("pk", flat=True)) == [hidden.pk]
