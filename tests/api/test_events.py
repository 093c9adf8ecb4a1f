"""POST /api/v1/executions/{id}/events and GET /api/v1/events."""

import uuid

import pytest

from tests.api.conftest import API, assert_error
from workflows_app.models import Event
from workflows_app.states import EXECUTION_ACTIVE, EXECUTION_TERMINAL, EventType, ExecutionStatus
from workflows_app.transitions import record_event


def deliver(client, execution, body):
    return client.post(f"{API}/executions/{execution.pk}/events", body, format="json")


@pytest.mark.parametrize("payload", [{"approved": True}, [1, 2], "text", 3.5, None, 2**80])
def test_an_event_is_stored_as_event_received_and_answered_202(api, make_execution, payload):
    execution = make_execution(status=ExecutionStatus.STARTED)
    response = deliver(api, execution, {"name": "approval", "payload": payload})
    assert response.status_code == 202, response.content
    body = response.json()
    stored = Event.objects.get(pk=body["id"])
    assert (stored.execution_id, stored.type, stored.data) == (
        execution.pk, EventType.EVENT_RECEIVED, {"name": "approval", "payload": payload})
    assert body == {"id": stored.pk, "execution_id": str(execution.pk), "operation": None, "type": "event_received",
                    "message": stored.message, "data": {"name": "approval", "payload": payload},
                    "timestamp": body["timestamp"]}
    assert body["timestamp"].endswith("Z")


def test_an_event_without_payload_has_a_null_payload(api, make_execution):
    response = deliver(api, make_execution(), {"name": "go"})
    assert response.status_code == 202 and response.json()["data"] == {"name": "go", "payload": None}


def test_an_event_wakes_the_execution_once_committed(api, make_execution, advances,
                                                    django_capture_on_commit_callbacks):
    execution = make_execution()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        deliver(api, execution, {"name": "go"})
    assert advances == [], "nothing is sent before the commit"
    for callback in callbacks:
        callback()
    assert advances == [str(execution.pk)]


@pytest.mark.parametrize("status", sorted(EXECUTION_ACTIVE))
def test_every_active_execution_takes_events(api, make_execution, status):
    assert deliver(api, make_execution(status=status), {"name": "go"}).status_code == 202


@pytest.mark.parametrize("status", sorted(EXECUTION_TERMINAL))
def test_an_ended_execution_refuses_events_with_execution_not_active(api, make_execution, status):
    execution = make_execution(status=status)
    body = assert_error(deliver(api, execution, {"name": "go"}), 409, "execution_not_active")
    assert status in body["message"]
    assert not Event.objects.filter(execution=execution).exists()


@pytest.mark.parametrize("body", [{}, {"name": None}, {"name": 5}, {"name": ["go"]}, {"name": ""},
                                  {"name": "go", "extra": 1}, {"name": "a\x00"}, {"name": "go", "payload": "a\x00"},
                                  {"name": "x" * 256}, [], "go", None, 7])
def test_an_event_without_a_string_name_is_invalid_parameters(api, make_execution, body):
    execution = make_execution()
    assert_error(deliver(api, execution, body), 400, "invalid_parameters")
    assert not Event.objects.filter(execution=execution).exists()


def test_an_event_for_an_unknown_execution_is_not_found(api, db):
    assert_error(api.post(f"{API}/executions/{uuid.uuid4()}/events", {"name": "go"}, format="json"), 404, "not_found")


# --- GET /events ---------------------------------------------------------------------------------

@pytest.fixture
def log(make_execution):
    """Two executions' events, interleaved: e1 log, e2 log, e1 task_started (op "s"), e2 event_received."""
    e1, e2 = make_execution(), make_execution()
    events = [record_event(e1.pk, EventType.LOG, "one"), record_event(e2.pk, EventType.LOG, "two"),
              record_event(e1.pk, EventType.TASK_STARTED, "three", {"k": 1}, operation="s"),
              record_event(e2.pk, EventType.EVENT_RECEIVED, "four")]
    return e1, e2, [e.pk for e in events]


def ids(response):
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_events_are_listed_in_id_order_with_their_fields(api, log):
    e1, _, pks = log
    response = api.get(f"{API}/events")
    assert ids(response) == pks
    third = response.json()["results"][2]
    assert third == {"id": pks[2], "execution_id": str(e1.pk), "operation": "s", "type": "task_started",
                     "message": "three", "data": {"k": 1}, "timestamp": third["timestamp"]}


def test_events_filter_by_execution_type_and_after(api, log):
    e1, e2, pks = log
    assert ids(api.get(f"{API}/events", {"execution_id": e1.pk})) == [pks[0], pks[2]]
    assert ids(api.get(f"{API}/events", {"type": "log"})) == [pks[0], pks[1]]
    assert ids(api.get(f"{API}/events", {"after": pks[1]})) == [pks[2], pks[3]]
    assert ids(api.get(f"{API}/events", {"after": pks[3]})) == []
    assert ids(api.get(f"{API}/events", {"after": 0})) == pks
    assert ids(api.get(f"{API}/events", {"after": 2**63 - 1})) == []
    assert ids(api.get(f"{API}/events", {"execution_id": e2.pk, "after": pks[1], "type": "event_received"})) == [
        pks[3]]
    assert ids(api.get(f"{API}/events", {"execution_id": uuid.uuid4()})) == []


def test_after_is_a_cursor_for_tailing(api, log):
    e1, _, pks = log
    page = api.get(f"{API}/events", {"execution_id": e1.pk, "limit": 1})
    seen = ids(page)
    while True:
        page = api.get(f"{API}/events", {"execution_id": e1.pk, "after": seen[-1], "limit": 1})
        if not ids(page):
            break
        seen += ids(page)
    new = record_event(e1.pk, EventType.LOG, "later")
    assert seen == [pks[0], pks[2]]
    assert ids(api.get(f"{API}/events", {"execution_id": e1.pk, "after": seen[-1]})) == [new.pk]


@pytest.mark.parametrize("query", [{"after": "x"}, {"after": "1.5"}, {"after": -1}, {"after": 2**63},
                                   {"after": 10**40}, {"after": ""}, {"type": "nope"}, {"type": "LOG"}, {"type": ""},
                                   {"execution_id": "not-a-uuid"}, {"execution_id": ""}, {"execution_id": "\x00"},
                                   {"limit": "many"}])
def test_a_bad_after_type_or_execution_id_is_invalid_parameters(api, log, query):
    body = assert_error(api.get(f"{API}/events", query), 400, "invalid_parameters")
    assert next(iter(query)) in body["message"]
