"""Typed workflow parameters through the API: a start whose parameters do not fit the workflow's
annotations is ``invalid_parameters`` naming each, ``GET /workflows`` gives each workflow's JSON
Schema, and the OpenAPI document has the start's body per workflow, with that schema."""

import json

import jsonschema
import pytest
from drf_spectacular.validation import validate_schema

from tests import typed_workflows
from tests.api.conftest import API, assert_error
from workflows_app import registry
from workflows_app.api.schema import SchemaGenerator
from workflows_app.models import Execution


@pytest.fixture
def typed(monkeypatch):
    return typed_workflows.register(monkeypatch)


def start(client, workflow_id, parameters):
    return client.post(f"{API}/executions", {"workflow_id": workflow_id, "parameters": parameters}, format="json")


@pytest.mark.parametrize("parameters, says", [
    ({"n": "three"}, "parameter 'n': expected integer, got string \"three\""),
    ({"n": True}, "parameter 'n': expected integer, got boolean true"),
    ({"n": 3.0}, "parameter 'n': expected integer, got number 3.0"),
    ({"n": 1, "ratio": False}, "parameter 'ratio': expected number, got boolean false"),
    ({"n": 1, "size": "huge"}, "parameter 'size': expected one of \"small\", \"large\", got string \"huge\""),
    ({"n": 1, "tags": ["a", 2]}, "parameter 'tags[1]': expected string, got integer 2"),
    ({"n": 1, "disk": {"size_gb": "big"}}, "parameter 'disk.size_gb': expected integer, got string \"big\""),
    ({"n": 1, "disk": {"size_gb": 1, "colour": "red"}}, "parameter 'disk': unknown field(s): colour"),
    ({"n": 1, "enabled": "yes", "label": 7},
     "parameter 'label': expected string, got integer 7; parameter 'enabled': expected boolean, got string \"yes\""),
])
def test_a_start_with_a_parameter_of_the_wrong_type_is_invalid_parameters_naming_it(api, typed, parameters, says):
    body = assert_error(start(api, typed, parameters), 400, "invalid_parameters")
    assert body["message"] == f"workflow 'typed': {says}"
    assert not Execution.objects.exists()


def test_a_start_whose_parameters_fit_their_types_is_stored_as_given(api, typed):
    parameters = {"n": 2, "size": "large", "ratio": 1, "label": "db", "enabled": False, "tags": ["a"],
                  "disk": {"size_gb": 10}, "extra": {"any": ["json", None]}}
    response = start(api, typed, parameters)
    assert response.status_code == 201, response.content
    assert Execution.objects.get(pk=response.json()["id"]).parameters == parameters
    assert start(api, typed, {"n": 1, "disk": None}).status_code == 201


def test_nan_for_a_float_is_refused_as_the_json_it_is_not(api, typed):
    """The API reads no NaN (the check refuses one too: a parent's code could pass it)."""
    body = '{"workflow_id": "typed", "parameters": {"n": 1, "ratio": NaN}}'
    response = api.generic("POST", f"{API}/executions", body, content_type="application/json")
    assert_error(response, 400, "parse_error")
    assert not Execution.objects.exists()


def test_workflows_gives_each_workflow_the_json_schema_of_its_parameters(api, typed):
    rows = {row["name"]: row for row in api.get(f"{API}/workflows", {"limit": 1000}).json()["results"]}
    schema = rows["typed"]["schema"]
    assert schema == registry.get_workflow("typed").schema
    assert schema["required"] == ["n"] and schema["additionalProperties"] is False
    assert schema["properties"]["n"] == {"type": "integer"}
    assert schema["properties"]["size"] == {"type": "string", "enum": ["small", "large"], "default": "small"}
    assert schema["properties"]["disk"]["anyOf"][0]["properties"]["size_gb"] == {"type": "integer"}
    assert schema["properties"]["extra"] == {"default": None}, "unannotated: any JSON value"
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"n": 1, "disk": {"size_gb": 3, "kind": "hdd"}})
    assert not validator.is_valid({"n": "three"})


def openapi_document(api):
    return json.loads(api.get(f"{API}/schema", {"format": "json"}).content)


def test_the_openapi_document_has_the_start_body_per_workflow_with_its_parameters(api, typed):
    document = openapi_document(api)
    components = document["components"]["schemas"]
    body = document["paths"]["/api/v1/executions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["discriminator"]["propertyName"] == "workflow_id"
    assert set(body["discriminator"]["mapping"]) == set(registry.workflows())
    assert body["discriminator"]["mapping"]["typed"] == "#/components/schemas/StartExecutionRequest_typed"
    assert {"$ref": "#/components/schemas/StartExecutionRequest_typed"} in body["oneOf"]

    variant = components["StartExecutionRequest_typed"]["allOf"]
    assert variant[0] == {"$ref": "#/components/schemas/StartExecutionRequest"}
    assert variant[1]["properties"]["workflow_id"] == {"type": "string", "enum": ["typed"]}
    assert variant[1]["properties"]["parameters"] == {"$ref": "#/components/schemas/StartParameters_typed"}
    assert variant[1]["required"] == ["workflow_id", "parameters"], "typed has a required parameter"
    demo = components["StartExecutionRequest_demo"]["allOf"][1]
    assert demo["required"] == ["workflow_id"] and demo["properties"]["parameters"]["nullable"] is True

    parameters = components["StartParameters_typed"]
    assert parameters["required"] == ["n"] and parameters["properties"]["n"] == {"type": "integer"}
    # OpenAPI 3.0 has no type null: Optional[Disk] is a nullable object.
    disk = parameters["properties"]["disk"]
    assert disk["nullable"] is True and disk["type"] == "object" and disk["title"] == "Disk" and "anyOf" not in disk
    assert disk["properties"]["kind"] == {"type": "string", "enum": ["ssd", "hdd"], "default": "ssd"}


def test_the_document_with_the_body_per_workflow_is_a_valid_openapi_document(api, typed):
    validate_schema(openapi_document(api))  # drf-spectacular's own check (spectacular --validate)


def test_the_docs_page_links_the_body_to_each_workflows_variant(api, typed):
    page = api.get(f"{API}/docs").content.decode()
    # Which workflows come first depends on what else this test process registered.
    [variants] = [line for line in page.splitlines() if "one of, by workflow_id: " in line]
    assert '<a href="#schema-StartExecutionRequest_demo">' in variants
    assert '<a href="#schema-StartExecutionRequest_typed">' in variants
    assert '<section id="schema-StartParameters_typed">' in page
    section = page.split('<section id="schema-StartExecutionRequest_typed">')[1].split("</section>")[0]
    assert '<a href="#schema-StartParameters_typed">StartParameters_typed</a>' in section


def test_component_names_are_made_of_what_a_component_name_may_hold_and_never_collide(monkeypatch):
    for name in ["a b", "a_b", "é"]:
        monkeypatch.setitem(registry._workflows, name, registry.WorkflowDef(name=name, func=lambda ctx: None))
    document = SchemaGenerator().get_schema(request=None, public=True)
    mapping = document["paths"]["/api/v1/executions"]["post"]["requestBody"]["content"]["application/json"][
        "schema"]["discriminator"]["mapping"]
    refs = [mapping[name].rsplit("/", 1)[-1] for name in ["a b", "a_b", "é"]]
    assert len(set(refs)) == 3 and all(ref in document["components"]["schemas"] for ref in refs)
    assert all(set(ref) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") for ref in refs)
