"""Concurrency limits through the API: the workflows list shows each limit, a start past it answers
201 with the execution ``queued``, an execution's document shows its key, and the list filters by it."""

import pytest

from tests import concurrency_workflows  # noqa: F401  (registers the cc_ workflows)
from tests.api.conftest import API, VIEWER, assert_error, make_user
from workflows_app import registry
from workflows_app.models import Execution


def start(client, **body):
    return client.post(f"{API}/executions", body, format="json")


def test_the_workflows_list_shows_each_limit_and_what_it_counts_per(api):
    rows = {row["name"]: row for row in api.get(f"{API}/workflows", {"limit": 1000}).json()["results"]}
    assert (rows["cc_per_customer"]["concurrency"], rows["cc_per_customer"]["concurrency_key"]) == (2, "customer")
    assert (rows["cc_whole"]["concurrency"], rows["cc_whole"]["concurrency_key"]) == (2, None)
    assert (rows["cc_per_deployment"]["concurrency"], rows["cc_per_deployment"]["concurrency_key"]) == (1, "deployment")
    assert (rows["demo"]["concurrency"], rows["demo"]["concurrency_key"]) == (None, None)


def test_a_start_past_the_limit_is_stored_queued_and_shows_its_key(api):
    bodies = [start(api, workflow_id="cc_per_customer", parameters={"customer": "acme"}).json() for _ in range(3)]
    assert [body["status"] for body in bodies] == ["pending", "pending", "queued"]
    assert {body["concurrency_key"] for body in bodies} == {'cc_per_customer:customer="acme"'}
    page = api.get(f"{API}/executions/{bodies[2]['id']}").json()
    assert page["status"] == "queued" and page["concurrency_key"] == 'cc_per_customer:customer="acme"'
    other = start(api, workflow_id="cc_per_customer", parameters={"customer": "globex"}).json()
    assert other["status"] == "pending"
    assert start(api, workflow_id="demo").json()["concurrency_key"] == ""


def test_a_busy_deployment_still_answers_existing_running_execution(api):
    assert start(api, workflow_id="cc_whole", deployment_id="site-1").status_code == 201
    assert_error(start(api, workflow_id="cc_whole", deployment_id="site-1"), 400, "existing_running_execution")
    assert start(api, workflow_id="cc_whole", deployment_id="site-1", queue=True).json()["status"] == "queued"


@pytest.mark.parametrize("customer, status, code", [
    (b'"a\\u0000b"', 400, "invalid_parameters"),
    (b'"\\ud800"', 400, "invalid_parameters"),
    (b"NaN", 400, "parse_error"),
    (b'"' + b"x" * 3_000_000 + b'"', 413, "payload_too_large"),
    (b"1e999", 400, "parse_error"),
])
def test_a_key_value_that_may_not_be_stored_is_refused_and_nothing_is_stored(api, customer, status, code):
    raw = b'{"workflow_id": "cc_per_customer", "parameters": {"customer": ' + customer + b"}}"
    assert_error(api.generic("POST", f"{API}/executions", raw, content_type="application/json"), status, code)
    assert not Execution.objects.filter(workflow_id="cc_per_customer").exists()


def test_a_default_that_cannot_make_a_key_is_invalid_parameters(api, monkeypatch):
    monkeypatch.setitem(registry._workflows, "cc_unkeyable", None)

    @registry.workflow(name="cc_unkeyable", concurrency=1, concurrency_key="since")
    def unkeyable(ctx, since=object()):
        pass

    body = assert_error(start(api, workflow_id="cc_unkeyable"), 400, "invalid_parameters")
    assert "concurrency key" in body["message"] and not Execution.objects.exists()


def test_the_list_filters_by_concurrency_key(api):
    acme = [start(api, workflow_id="cc_per_customer", parameters={"customer": "acme"}).json()["id"] for _ in range(3)]
    start(api, workflow_id="cc_per_customer", parameters={"customer": "globex"})
    start(api, workflow_id="demo")

    def listed(**query):
        response = api.get(f"{API}/executions", {"ordering": "created_at", **query})
        assert response.status_code == 200, response.content
        return [row["id"] for row in response.json()["results"]]

    assert listed(concurrency_key='cc_per_customer:customer="acme"') == acme
    assert listed(concurrency_key='cc_per_customer:customer="acme"', status="queued") == acme[2:]
    assert listed(concurrency_key="nothing") == [] and listed(concurrency_key="a\x00") == []
    assert len(listed(concurrency_key="")) == 5, "an empty text filter filters nothing"
    rows = api.get(f"{API}/executions", {"concurrency_key": 'cc_per_customer:customer="globex"'}).json()["results"]
    assert [row["concurrency_key"] for row in rows] == ['cc_per_customer:customer="globex"']


def test_a_user_without_the_permission_to_start_is_refused_before_anything_is_counted(db):
    from tests.api.conftest import CheckedClient

    client = CheckedClient()
    client.force_authenticate(make_user("viewer", VIEWER))
    assert_error(start(client, workflow_id="cc_whole"), 403, "permission_denied")
    assert not Execution.objects.exists()
    assert client.get(f"{API}/executions", {"concurrency_key": "cc_whole"}).status_code == 200
