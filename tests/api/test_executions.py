"""GET /api/v1/executions (filters, ordering, pagination) and GET /api/v1/executions/{id}."""

from datetime import datetime, timedelta, timezone

import pytest

from tests.api.conftest import API, assert_error
from workflows_app.models import Execution
from workflows_app.states import ExecutionStatus, OperationState
from tests import UNKNOWN_ID


T0 = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)


def at(execution, created_at, **fields):
    """Set timestamps that auto_now_add would not let the fixture set."""
    Execution.objects.filter(pk=execution.pk).update(created_at=created_at, **fields)
    return execution


def ids(response):
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


@pytest.fixture
def three(make_execution):
    """a (demo, completed, dep-1, T0), b (other, failed, dep-2, T0+1h), c (demo, started, none, T0+2h)."""
    a = at(make_execution(status=ExecutionStatus.COMPLETED, workflow_id="demo", deployment_id="dep-1"), T0,
           started_at=T0 + timedelta(minutes=5), ended_at=T0 + timedelta(hours=5))
    b = at(make_execution(status=ExecutionStatus.FAILED, workflow_id="other", deployment_id="dep-2"),
           T0 + timedelta(hours=1), started_at=T0 + timedelta(minutes=1), ended_at=T0 + timedelta(hours=3))
    c = at(make_execution(status=ExecutionStatus.STARTED, workflow_id="demo"), T0 + timedelta(hours=2),
           started_at=T0 + timedelta(hours=2))
    return str(a.pk), str(b.pk), str(c.pk)


def test_the_list_is_newest_first_and_paginated_with_count_next_previous(api, three):
    a, b, c = three
    response = api.get(f"{API}/executions")
    assert set(response.json()) == {"count", "next", "previous", "results"}
    assert ids(response) == [c, b, a]
    assert response.json()["count"] == 3 and response.json()["next"] is None and response.json()["previous"] is None


def test_limit_and_offset_page_through_the_list(api, three):
    a, b, c = three
    first = api.get(f"{API}/executions", {"limit": 2})
    assert ids(first) == [c, b] and first.json()["count"] == 3 and first.json()["previous"] is None
    assert "offset=2" in first.json()["next"] and "limit=2" in first.json()["next"]
    second = api.get(first.json()["next"])
    assert ids(second) == [a] and second.json()["next"] is None and second.json()["previous"]
    assert ids(api.get(f"{API}/executions", {"offset": 10})) == []
    assert ids(api.get(f"{API}/executions", {"offset": 10**30})) == []


def test_the_default_page_is_100_and_no_page_is_larger_than_1000(api, make_execution):
    Execution.objects.bulk_create([Execution(workflow_id="bulk") for _ in range(1005)])
    assert len(ids(api.get(f"{API}/executions"))) == 100
    assert len(ids(api.get(f"{API}/executions", {"limit": 5000}))) == 1000


@pytest.mark.parametrize("query", [{"limit": "abc"}, {"limit": 0}, {"limit": -1}, {"limit": "1.5"}, {"limit": ""},
                                   {"offset": "x"}, {"offset": -3}, {"limit": "٣"}])
def test_a_limit_or_offset_that_is_not_a_count_is_invalid_parameters(api, three, query):
    body = assert_error(api.get(f"{API}/executions", query), 400, "invalid_parameters")
    assert next(iter(query)) in body["message"]


@pytest.mark.parametrize("query, expected", [
    ({"status": "completed"}, "a"),
    ({"status": "failed"}, "b"),
    ({"status": "queued"}, ""),
    ({"workflow_id": "demo"}, "ca"),
    ({"workflow_id": "nothing"}, ""),
    ({"deployment_id": "dep-2"}, "b"),
    ({"created_after": (T0 + timedelta(hours=1)).isoformat()}, "cb"),
    ({"created_after": "2030-01-01T13:00:00Z"}, "cb"),
    ({"created_after": "2030-01-01T14:00:00+01:00"}, "cb"),  # 13:00 UTC
    ({"created_after": "2030-01-01T13:00:00"}, "cb"),  # naive: UTC
    ({"created_before": "2030-01-01T13:00:00Z"}, "a"),  # before: strictly
    ({"created_after": "2030-01-01T00:00:00Z", "created_before": "2030-01-01T13:30:00Z"}, "ba"),
    ({"status": "started", "workflow_id": "demo"}, "c"),
    ({"workflow_id": ""}, "cba"),  # an empty text filter filters nothing
    ({"workflow_id": "de\x00mo"}, ""),  # no stored text has a NUL character
    ({"deployment_id": "\x00"}, ""),
])
def test_every_filter(api, three, query, expected):
    names = dict(zip("abc", three))
    assert ids(api.get(f"{API}/executions", query)) == [names[n] for n in expected]


@pytest.mark.parametrize("query", [
    {"status": "running"}, {"status": "COMPLETED"}, {"status": ""},
    {"created_after": "yesterday"}, {"created_after": "2030-13-01T00:00:00Z"}, {"created_before": ""},
    {"created_after": "0000-01-01T00:00:00Z"},
    {"created_before": "9999-12-31T23:59:59-05:00"},  # past the year 9999 in UTC
    {"created_after": "0001-01-01T00:00:00+05:00"},  # before the year 1 in UTC
    {"ordering": "colour"}, {"ordering": "-created_at,token_hash"}, {"ordering": "id"}, {"ordering": ",,"},
    {"ordering": "created_at,"}, {"ordering": ",status"}, {"ordering": "-"}, {"ordering": ""},
])
def test_a_filter_value_that_is_none_of_its_field_s_values_is_invalid_parameters(api, three, query):
    body = assert_error(api.get(f"{API}/executions", query), 400, "invalid_parameters")
    assert next(iter(query)) in body["message"]


@pytest.mark.parametrize("ordering, expected", [
    ("created_at", "abc"), ("-created_at", "cba"),
    ("started_at", "bac"), ("-started_at", "cab"),
    ("ended_at", None), ("-ended_at", None),
    ("status", "abc"),  # completed < failed < started
    ("-status", "cba"),
    ("workflow_id,created_at", "acb"), ("-workflow_id,created_at", "bac"),
    ("workflow_id,-created_at", "cab"),
])
def test_every_ordering(api, three, ordering, expected):
    names = dict(zip("abc", three))
    got = ids(api.get(f"{API}/executions", {"ordering": ordering}))
    if expected is None:  # where NULLs sort depends on the database; the others are ordered
        a, b = names["a"], names["b"]
        ended = [i for i in got if i in (a, b)]
        assert ended == ([b, a] if ordering == "ended_at" else [a, b]) and len(got) == 3
    else:
        assert got == [names[n] for n in expected]


@pytest.mark.parametrize("ordering, expected", [("workflow_id", ["demo", "demo", "other"]),
                                                ("-workflow_id", ["other", "demo", "demo"])])
def test_ordering_by_workflow_id(api, three, ordering, expected):
    response = api.get(f"{API}/executions", {"ordering": ordering})
    assert [row["workflow_id"] for row in response.json()["results"]] == expected


def test_executions_created_in_the_same_instant_are_paged_without_overlap(api, make_execution):
    rows = [at(make_execution(), T0) for _ in range(7)]
    seen = []
    for offset in range(0, 7, 3):
        seen += ids(api.get(f"{API}/executions", {"limit": 3, "offset": offset}))
    assert sorted(seen) == sorted(str(r.pk) for r in rows)


# --- one execution -----------------------------------------------------------------------------

def test_one_execution_has_its_fields_and_a_count_per_operation_state_zeros_included(api, make_execution,
                                                                                     make_operation):
    execution = make_execution(status=ExecutionStatus.STARTED, parameters={"n": 1}, payload={"k": [1]},
                               deployment_id="d", token_hash="f" * 64)
    for state in [OperationState.SUCCEEDED, OperationState.SUCCEEDED, OperationState.STARTED, OperationState.FAILED]:
        make_operation(state, execution)
    make_operation(OperationState.PENDING)  # another execution's
    response = api.get(f"{API}/executions/{execution.pk}")
    assert response.status_code == 200
    body = response.json()
    assert body["operations_summary"] == {"pending": 0, "sending": 0, "sent": 0, "started": 1, "rescheduled": 0,
                                          "succeeded": 2, "failed": 1, "cancelled": 0}
    assert (body["id"], body["status"], body["parameters"], body["payload"], body["deployment_id"]) == (
        str(execution.pk), "started", {"n": 1}, {"k": [1]}, "d")
    assert "f" * 64 not in response.content.decode()
    assert not {"token", "token_hash"} & set(body)


def test_an_execution_without_operations_counts_zero_in_every_state(api, make_execution):
    body = api.get(f"{API}/executions/{make_execution().pk}").json()
    assert body["operations_summary"] == dict.fromkeys([s.value for s in OperationState], 0)


@pytest.mark.parametrize("suffix", ["", "/operations", "/graph"])
@pytest.mark.parametrize("execution_id", [UNKNOWN_ID, "not-a-uuid", "123", "%00", "x" * 300])
def test_an_unknown_id_or_one_that_is_not_a_uuid_is_not_found(api, db, execution_id, suffix):
    assert_error(api.get(f"{API}/executions/{execution_id}{suffix}"), 404, "not_found")


def test_an_execution_is_found_by_its_uuid_in_any_spelling(api, make_execution):
    execution = make_execution()
    assert api.get(f"{API}/executions/{execution.pk.hex.upper()}").json()["id"] == str(execution.pk)


def test_timestamps_are_iso_8601_in_utc(api, make_execution):
    execution = at(make_execution(), datetime(2030, 6, 1, 12, 0, tzinfo=timezone(timedelta(hours=2))))
    assert api.get(f"{API}/executions/{execution.pk}").json()["created_at"] == "2030-06-01T10:00:00Z"
