"""GET /api/v1/schema (OpenAPI 3, drf-spectacular) and GET /api/v1/docs."""

import json
import re
import uuid

import pytest
import yaml
from django.core.management import call_command
from rest_framework.test import APIClient

from tests.api.conftest import API, GUARDED_PERMISSION, VIEWER, CheckedClient, assert_conforms, make_user, openapi
from workflows_app import registry
from workflows_app.api.schema import SchemaGenerator

SPEC_OPERATIONS = {
    ("get", "/api/v1/workflows"), ("post", "/api/v1/workflows/{id}"), ("post", "/api/v1/executions"), ("get", "/api/v1/executions"),
    ("get", "/api/v1/executions/{id}"), ("post", "/api/v1/executions/{id}"), ("post", "/api/v1/executions/bulk"),
    ("get", "/api/v1/executions/{id}/operations"), ("get", "/api/v1/executions/{id}/graph"),
    ("post", "/api/v1/executions/{id}/events"), ("get", "/api/v1/events"), ("get", "/api/v1/agents"),
    ("get", "/api/v1/schedules"), ("post", "/api/v1/schedules"), ("get", "/api/v1/schedules/{id}"),
    ("patch", "/api/v1/schedules/{id}"), ("delete", "/api/v1/schedules/{id}"), ("post", "/api/v1/schedules/{id}"),
    ("get", "/api/v1/metrics"),
}


def test_the_schema_validates_without_a_warning(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"),
                 "--generator-class", "workflows_app.api.schema.SchemaGenerator")
    assert yaml.safe_load((tmp_path / "schema.yaml").read_text())["openapi"].startswith("3.")


def test_the_schema_is_served_as_yaml_and_as_json(api):
    as_yaml = yaml.safe_load(api.get(f"{API}/schema").content)
    as_json = json.loads(api.get(f"{API}/schema", {"format": "json"}).content)
    assert as_yaml == as_json
    documented = {(method, path) for path, item in as_json["paths"].items() for method in item}
    assert documented == SPEC_OPERATIONS


def test_every_operation_documents_its_errors_in_the_one_shape():
    schema = openapi()
    assert schema["components"]["schemas"]["Error"]["required"] == ["error_code", "message"]
    expected = {"get": {"200", "401"}, "post": {"400", "401", "403", "415"}, "patch": {"200", "400", "401", "403", "415"},
                "delete": {"204", "401", "403"}}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            codes = set(operation["responses"])
            assert expected[method] <= codes, (method, path, codes)
            if "{id}" in path:
                assert "404" in codes, (method, path)
            for code in codes - {"200", "201", "202", "204"}:
                assert operation["responses"][code]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/Error"}, (method, path, code)
    assert "409" in schema["paths"]["/api/v1/executions/{id}"]["post"]["responses"]
    assert "409" in schema["paths"]["/api/v1/executions/{id}/events"]["post"]["responses"]
    assert "201" in schema["paths"]["/api/v1/executions"]["post"]["responses"]
    assert "202" in schema["paths"]["/api/v1/executions/{id}/events"]["post"]["responses"]


def test_every_body_that_refuses_an_unknown_key_documents_that_it_does(api):
    """A client (or a generator of test requests) learns from the schema that an extra key is a
    400, not a key the server ignores."""
    schema = openapi()
    bodies = {path: operation["requestBody"]["content"]["application/json"]["schema"]
              for path, item in schema["paths"].items() for operation in item.values() if "requestBody" in operation}
    assert bodies, "the API takes bodies"
    components = schema["components"]["schemas"]
    for path, body in bodies.items():
        refs = [variant["$ref"] for variant in body.get("oneOf", [body]) if "$ref" in variant]
        for ref in refs:
            component = components[ref.rsplit("/", 1)[1]]
            base = component["allOf"][0]["$ref"].rsplit("/", 1)[1] if "allOf" in component else None
            assert (components[base] if base else component).get("additionalProperties") is False, (path, ref)
    answer = api.post(f"{API}/schedules/{uuid.uuid4()}", {"action": "pause", "extra": 1}, format="json")
    assert answer.status_code == 400 and answer.json()["error_code"] == "invalid_parameters"


def test_the_query_parameters_of_the_lists_are_documented():
    def names(path):
        return {p["name"] for p in openapi()["paths"][path]["get"].get("parameters", []) if p["in"] == "query"}

    assert names("/api/v1/executions") == {"status", "workflow_id", "deployment_id", "concurrency_key", "parent",
                                           "rerun_of", "schedule",
                                           "created_after", "created_before", "ordering", "limit", "offset"}
    assert names("/api/v1/schedules") == {"workflow_id", "paused", "limit", "offset"}
    assert names("/api/v1/events") == {"execution_id", "after", "type", "limit", "offset"}
    for path in ["/api/v1/workflows", "/api/v1/agents", "/api/v1/executions/{id}/operations"]:
        assert names(path) == {"limit", "offset"}


def test_a_bulk_actions_filter_documents_each_key_as_the_lists_query_parameter_does():
    """A client (or a fuzzer) that sends what the schema describes sends ids where ids go and
    times where times go: a ``filter.schedule`` that is no UUID is refused, so the schema says
    it must be one, as ``GET /executions?schedule=`` does."""
    schema = openapi()
    query = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/executions"]["get"]["parameters"]}
    body = schema["components"]["schemas"]["BulkFilterRequest"]["properties"]
    formats = {name: body[name].get("format") for name in body if name != "all"}
    assert formats == {name: query[name].get("format") for name in formats}
    assert {name for name, text_format in formats.items() if text_format} == {
        "parent", "rerun_of", "schedule", "created_after", "created_before"}


def test_no_token_is_ever_a_field_of_a_documented_response():
    fields = {name for component in openapi()["components"]["schemas"].values()
              for name in component.get("properties", {})}
    assert "operations_summary" in fields and not {f for f in fields if "token" in f}


def test_the_conformance_check_of_this_suite_catches_a_wrong_response(user):
    client = APIClient()
    client.force_authenticate(user)
    response = client.get(f"{API}/executions")
    assert_conforms(response)
    response._json = {"count": "many", "results": [{"id": "x"}]}
    with pytest.raises(AssertionError, match="count"):
        assert_conforms(response)
    response.status_code = 418
    with pytest.raises(AssertionError, match="418"):
        assert_conforms(response)


def test_the_docs_page_lists_every_operation_and_loads_nothing_from_elsewhere(api):
    response = api.get(f"{API}/docs")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    for method, path in SPEC_OPERATIONS:
        assert f"<code>{path}</code>" in page, path
    assert "ExecutionDetail" in page and "operations_summary" in page and "error_code" in page
    assert '<a href="#schema-ExecutionDetail">ExecutionDetail</a>, <a href="#schema-Acknowledgement">' in page
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\(", page, re.I), "no asset, no script"
    assert not re.search(r"(src|href)=\"(https?:)?//", page), "no link to another host"


def test_the_schema_names_the_registered_workflows_as_the_values_of_workflow_id(api, monkeypatch):
    from workflows_app import registry

    monkeypatch.setitem(registry._workflows, "zz_extra", registry.WorkflowDef(name="zz_extra", func=lambda ctx: None))
    schema = json.loads(api.get(f"{API}/schema", {"format": "json"}).content)
    assert schema["components"]["schemas"]["WorkflowIdEnum"]["enum"] == sorted(registry.workflows())
    assert "zz_extra" in schema["components"]["schemas"]["WorkflowIdEnum"]["enum"]


def test_the_docs_page_shows_the_schemas_markdown_as_html_and_names_the_version_apart(api):
    page = api.get(f"{API}/docs").content.decode()
    # drf-spectacular lists an enum's choices as a markdown list: a list on the page, not "* `pending`".
    assert "<li><code>pending</code> - Pending</li>" in page
    assert "* <code>" not in page and "* `" not in page
    assert "<h1>Switchyard API</h1>" in page and "Version 1 of the API, served under <code>/api/v1/</code>" in page


def test_the_demo_projects_root_leads_to_the_admin(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"] == "/admin/"


#: A workflow registered with a permission of its own, and a parameter of it no other has.
SECRET, SECRET_PARAMETER = "zz_secret_payroll", "salary_ceiling"


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setitem(registry._workflows, SECRET, None)  # the registration is undone after the test

    @registry.workflow(name=SECRET, permission=GUARDED_PERMISSION)
    def payroll(ctx, salary_ceiling: int = 1):
        return salary_ceiling


@pytest.mark.parametrize("holds", [False, True])
def test_the_schema_and_the_docs_name_only_the_workflows_the_user_may_see(db, secret, holds):
    """As GET workflows lists them: a workflow whose own permission the user lacks, and its
    parameters, are neither in the schema nor on the docs page it receives."""
    client = CheckedClient()
    client.force_authenticate(make_user("viewer", VIEWER + ((GUARDED_PERMISSION,) if holds else ())))
    # Every workflow registered in this process, on one page (the default page holds 100).
    listed = [row["name"] for row in client.get(f"{API}/workflows", {"limit": 1000}).json()["results"]]
    assert (SECRET in listed) == holds and "demo" in listed
    as_json = client.get(f"{API}/schema", {"format": "json"})
    schema = json.loads(as_json.content)
    assert (SECRET in schema["components"]["schemas"]["WorkflowIdEnum"]["enum"]) == holds
    assert ("StartParameters_" + SECRET in schema["components"]["schemas"]) == holds
    assert "StartParameters_demo" in schema["components"]["schemas"]
    for text in [as_json.content.decode(), client.get(f"{API}/schema").content.decode(),
                 client.get(f"{API}/docs").content.decode()]:
        assert (SECRET in text) == holds and (SECRET_PARAMETER in text) == holds
        assert "StartParameters_demo" in text


def test_the_schema_generated_without_a_request_names_every_workflow(secret):
    # manage.py spectacular: the server's own access
    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert SECRET in schema["components"]["schemas"]["WorkflowIdEnum"]["enum"]
    assert "StartParameters_" + SECRET in schema["components"]["schemas"]
