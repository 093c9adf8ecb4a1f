"""What the API lets through, in volume: throttles per user, lists without
parameters, payloads or results, pages bounded in bytes, and a body over Django's limit answered
413."""

import json
import logging

import pytest
from django.conf import settings
from django.test import override_settings

from tests.api.conftest import API, assert_error, openapi
from workflows_app.api.pagination import page_bytes
from workflows_app.api.throttling import ReadRateThrottle, WriteRateThrottle
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import EventType, ExecutionStatus, OperationState

MiB = 1024 * 1024


def rates(**rates):
    return override_settings(WORKFLOWS={"API_THROTTLE_RATES": rates})


def start(client):
    return client.post(f"{API}/executions", {"workflow_id": "demo"}, format="json")


# --- throttles -------------------------------------------------------------------------------

def test_the_default_rates_are_1200_reads_and_240_writes_a_minute():
    assert (ReadRateThrottle().num_requests, ReadRateThrottle().duration) == (1200, 60)
    assert (WriteRateThrottle().num_requests, WriteRateThrottle().duration) == (240, 60)


def test_writes_over_the_rate_are_429_throttled_with_retry_after_and_change_nothing(api):
    with rates(write="3/minute"):
        assert [start(api).status_code for _ in range(3)] == [201, 201, 201]
        response = start(api)
        body = assert_error(response, 429, "throttled")
        assert 1 <= int(response["Retry-After"]) <= 60, response.headers
        assert "throttled" in body["message"].lower()
        assert Execution.objects.count() == 3, "the refused start stored nothing"
        execution = Execution.objects.first()
        assert_error(api.post(f"{API}/executions/{execution.pk}/events", {"name": "go"}, format="json"),
                     429, "throttled")
        assert_error(api.post(f"{API}/executions/{execution.pk}", {"action": "cancel"}, format="json"),
                     429, "throttled")
        # Reads are counted apart.
        assert api.get(f"{API}/executions").status_code == 200


def test_reads_over_their_rate_are_throttled_on_every_endpoint_and_writes_go_on(api, make_execution):
    execution = make_execution()
    with rates(read="2/minute"):
        assert api.get(f"{API}/executions").status_code == 200
        assert api.get(f"{API}/executions/{execution.pk}").status_code == 200
        for path in ("/executions", f"/executions/{execution.pk}", f"/executions/{execution.pk}/operations",
                     f"/executions/{execution.pk}/graph", "/events", "/workflows", "/agents"):
            response = api.get(API + path)
            assert_error(response, 429, "throttled")
            assert int(response["Retry-After"]) >= 1
        assert start(api).status_code == 201


def test_each_user_is_counted_apart(api, force_api):
    with rates(write="2/minute"):
        assert [start(api).status_code for _ in range(3)] == [201, 201, 429]
        assert [start(force_api).status_code for _ in range(2)] == [201, 201]


def test_the_rates_are_read_at_each_request_and_none_is_no_limit(api):
    with rates(write="1/minute"):
        assert [start(api).status_code for _ in range(2)] == [201, 429]
    with rates(write=None):
        assert [start(api).status_code for _ in range(5)] == [201] * 5


def test_every_operation_documents_429():
    for path, item in openapi()["paths"].items():
        for method, operation in item.items():
            assert "429" in operation["responses"], f"{method} {path}"


# --- lists carry no parameters or payloads ---------------------------------------------------

def test_the_executions_list_leaves_out_parameters_and_payload_which_the_execution_shows(api, make_execution):
    big = {"blob": "x" * MiB}
    execution = make_execution(parameters=big, payload=big)
    response = api.get(f"{API}/executions")
    assert response.status_code == 200
    [item] = response.json()["results"]
    assert item["id"] == str(execution.pk) and item["workflow_id"] == "example"
    assert "parameters" not in item and "payload" not in item
    assert len(response.content) < 4096, "the list does not carry the megabytes of the execution"
    shown = api.get(f"{API}/executions/{execution.pk}").json()
    assert shown["parameters"] == big and shown["payload"] == big


def test_the_schema_documents_the_list_items_without_parameters_and_payload():
    schema = openapi()
    listed = schema["paths"]["/api/v1/executions"]["get"]["responses"]["200"]["content"]["application/json"]
    page = schema["components"]["schemas"][listed["schema"]["$ref"].rsplit("/", 1)[1]]
    item = schema["components"]["schemas"][page["properties"]["results"]["items"]["$ref"].rsplit("/", 1)[1]]
    assert "id" in item["properties"] and "status" in item["properties"]
    assert not {"parameters", "payload"} & set(item["properties"])
    one = schema["paths"]["/api/v1/executions/{id}"]["get"]["responses"]["200"]["content"]["application/json"]
    detail = schema["components"]["schemas"][one["schema"]["$ref"].rsplit("/", 1)[1]]
    assert {"parameters", "payload"} <= set(detail["properties"])


# --- pages bounded in bytes ------------------------------------------------------------------

def follow(client, url):
    """Every page from ``url`` on, following ``next``."""
    pages = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        pages.append(response)
        url = response.json()["next"]
        assert len(pages) <= 50, "next never ends"
    return pages


def large_events(execution, n, size):
    """``n`` events of about ``size`` bytes each, half in the data, half in the message, whose
    characters take two bytes each in UTF-8 (a count of characters would take them for half)."""
    return Event.objects.bulk_create(Event(execution=execution, type=EventType.LOG, message="é" * (size // 4),
                                           data={"i": i, "blob": "x" * (size // 2)}) for i in range(n))


def test_a_page_of_events_stops_at_the_byte_bound_and_next_returns_every_event_once(api, make_execution):
    execution = make_execution()
    events = large_events(execution, 10, MiB)
    small = Event.objects.create(execution=execution, type=EventType.LOG, message="last")
    bound = page_bytes()
    assert bound == 4 * MiB  # twice MAX_PAYLOAD_BYTES, 2 MiB by default

    pages = follow(api, f"{API}/events?execution_id={execution.pk}&limit=100")
    seen = [item["id"] for page in pages for item in page.json()["results"]]
    assert seen == [event.pk for event in events] + [small.pk], "every event once, in order"
    assert len(pages) >= 3
    for page in pages:
        assert len(page.content) <= bound, len(page.content)
        assert page.json()["count"] == 11
        if page.json()["next"]:
            assert "limit=100" in page.json()["next"], "next keeps the limit asked for"
    assert pages[0].json()["results"][0]["data"] == {"i": 0, "blob": "x" * (MiB // 2)}


def test_a_page_holds_at_least_one_item_however_large(api, make_execution):
    execution = make_execution()
    events = large_events(execution, 3, 8 * 1024)
    with override_settings(WORKFLOWS={"MAX_PAYLOAD_BYTES": 1024}):  # a bound of 2 KiB
        pages = follow(api, f"{API}/events?execution_id={execution.pk}")
        past_the_end = api.get(f"{API}/events?offset=5").json()
    assert [[item["id"] for item in page.json()["results"]] for page in pages] == [[event.pk] for event in events]
    assert (past_the_end["count"], past_the_end["results"], past_the_end["next"]) == (3, [], None)


def test_a_page_of_operations_stops_at_the_byte_bound_and_next_returns_every_operation_once(api, make_execution):
    execution = make_execution()
    blob = "x" * (MiB // 2)
    operations = [Operation.objects.create(execution=execution, name=f"step-{i}", operation="noop", agent="a",
                                           state=OperationState.SUCCEEDED, args=[blob], result={"out": blob})
                  for i in range(8)]
    pages = follow(api, f"{API}/executions/{execution.pk}/operations")
    seen = [item["id"] for page in pages for item in page.json()["results"]]
    assert seen == [str(operation.pk) for operation in operations]
    assert len(pages) >= 2
    assert all(len(page.content) <= page_bytes() for page in pages)


def test_the_schema_documents_the_byte_bound_of_events_and_operations():
    paths = openapi()["paths"]
    for path in ("/api/v1/events", "/api/v1/executions/{id}/operations"):
        [limit] = [p for p in paths[path]["get"]["parameters"] if p["name"] == "limit"]
        assert f"{page_bytes()} bytes" in limit["description"] and "next" in limit["description"], path


# --- a body over Django's limit --------------------------------------------------------------

def three_mb_body(**fields):
    body = json.dumps({**fields, "padding": "x" * (3 * 1000 * 1000)})
    assert len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return body


@pytest.mark.parametrize("path, fields", [
    ("/executions", {"workflow_id": "demo"}),
    ("/executions/{id}/events", {"name": "go"}),
    ("/executions/{id}", {"action": "cancel"}),
])
def test_a_body_over_the_limit_is_413_payload_too_large_without_a_traceback(api, make_execution, caplog, path,
                                                                            fields):
    execution = make_execution(status=ExecutionStatus.STARTED)
    with caplog.at_level(logging.INFO):
        response = api.generic("POST", API + path.format(id=execution.pk), three_mb_body(**fields),
                               content_type="application/json")
    body = assert_error(response, 413, "payload_too_large")
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in body["message"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text
    assert Execution.objects.get().status == ExecutionStatus.STARTED and not Event.objects.exists()
