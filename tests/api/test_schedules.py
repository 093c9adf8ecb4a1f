"""/api/v1/schedules: create, list, read, change, delete a schedule; pause, resume, trigger it —
every answer checked against the published schema (``CheckedClient``); bad values and users
without the permission refused in the one error shape, with nothing changed."""

import datetime
import json
import uuid

import pytest

from tests.api.conftest import API, VIEWER, CheckedClient, assert_error, make_user
from tests.typed_workflows import register as register_typed
from workflows_app import clock
from workflows_app.models import Execution, Schedule, ScheduleSlot

SCHEDULE_FIELDS = {"id", "workflow_id", "parameters", "cron", "interval", "timezone", "overlap", "catchup_window",
                   "jitter", "paused", "next_run_at", "last_run_at", "buffered_slot", "created_by", "created_at",
                   "updated_at", "recent_slots"}
T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture
def at_t0():
    """The engine's clock at T0; the test moves it on with ``at_t0.now = ...``."""

    class At:
        now = T0

    moment = At()
    with clock.using(lambda: moment.now):
        yield moment


def create(client, **body):
    # As JSON text with escapes: a lone surrogate, which JSON allows, reaches the server as such.
    return client.post(f"{API}/schedules", json.dumps(body), content_type="application/json")


def url(schedule_id):
    return f"{API}/schedules/{schedule_id}"


def act(client, schedule_id, action):
    return client.post(url(schedule_id), {"action": action}, format="json")


@pytest.fixture
def nightly(api, at_t0):
    response = create(api, workflow_id="demo", parameters={"n": 2}, cron="0 3 * * *", timezone="Europe/Paris")
    assert response.status_code == 201, response.content
    return response.json()


def test_create_answers_201_with_the_schedule_and_its_next_run(api, at_t0):
    response = create(api, workflow_id="demo", parameters={"n": 2}, cron="0 3 * * *", timezone="Europe/Paris",
                      overlap="buffer_one", catchup_window=600, jitter=30)
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == SCHEDULE_FIELDS
    assert (body["workflow_id"], body["parameters"], body["cron"], body["interval"], body["timezone"]) == (
        "demo", {"n": 2}, "0 3 * * *", None, "Europe/Paris")
    assert (body["overlap"], body["catchup_window"], body["jitter"], body["paused"]) == ("buffer_one", 600, 30, False)
    assert body["next_run_at"] == "2026-03-02T02:00:00Z" and body["last_run_at"] is None
    assert body["created_by"] == "alice" and body["recent_slots"] == []
    assert response["Location"].endswith(f"/api/v1/schedules/{body['id']}")
    assert api.get(url(body["id"])).json() == body


def test_the_defaults_are_utc_skip_no_catch_up_no_jitter_and_active(api, at_t0):
    body = create(api, workflow_id="demo", interval=300).json()
    assert (body["timezone"], body["overlap"], body["catchup_window"], body["jitter"], body["paused"]) == (
        "UTC", "skip", 0, 0, False)
    assert body["cron"] == "" and body["parameters"] == {} and body["next_run_at"] == "2026-03-01T12:05:00Z"
    paused = create(api, workflow_id="demo", interval=300, paused=True).json()
    assert paused["paused"] and paused["next_run_at"] is None


def test_the_list_is_paginated_filtered_and_leaves_the_parameters_out(api, at_t0):
    for n in range(3):
        create(api, workflow_id="demo", parameters={"n": n}, interval=60 + n, paused=n == 2)
    page = api.get(f"{API}/schedules", {"limit": 2}).json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    assert "parameters" not in page["results"][0] and "recent_slots" not in page["results"][0]
    assert [s["interval"] for s in api.get(f"{API}/schedules", {"paused": "true"}).json()["results"]] == [62]
    assert api.get(f"{API}/schedules", {"paused": "false"}).json()["count"] == 2
    assert api.get(f"{API}/schedules", {"workflow_id": "other"}).json()["count"] == 0
    assert_error(api.get(f"{API}/schedules", {"paused": "maybe"}), 400, "invalid_parameters")


def test_patch_changes_the_fields_given_and_moves_the_next_run_with_the_timing(api, nightly):
    response = api.patch(url(nightly["id"]), {"parameters": {"n": 9}, "jitter": 5}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["parameters"], body["jitter"], body["next_run_at"]) == ({"n": 9}, 5, nightly["next_run_at"])
    # An interval replaces the cron expression.
    body = api.patch(url(nightly["id"]), {"interval": 3600}, format="json").json()
    assert (body["cron"], body["interval"], body["next_run_at"]) == ("", 3600, "2026-03-01T13:00:00Z")


@pytest.mark.parametrize("body, names", [
    ({"workflow_id": "demo"}, "workflow_id"),
    ({"cron": "every day"}, "cron"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"interval": 0}, "interval"),
    ({"overlap": "never"}, "overlap"),
])
def test_a_patch_that_does_not_fit_is_refused_and_changes_nothing(api, nightly, body, names):
    refused = assert_error(api.patch(url(nightly["id"]), body, format="json"), 400, "invalid_parameters")
    assert names in refused["message"]
    assert {k: v for k, v in api.get(url(nightly["id"])).json().items() if k != "recent_slots"} == {
        k: v for k, v in nightly.items() if k != "recent_slots"}


def test_pause_resume_and_trigger(api, nightly, at_t0, django_capture_on_commit_callbacks):
    paused = act(api, nightly["id"], "pause")
    assert paused.status_code == 200, paused.content
    assert (paused.json()["paused"], paused.json()["next_run_at"], paused.json()["triggered"]) == (True, None, None)

    with django_capture_on_commit_callbacks():
        triggered = act(api, nightly["id"], "trigger").json()
    slot = triggered["triggered"]
    assert slot["outcome"] == "started" and slot["slot"] == "2026-03-01T12:00:00Z" and triggered["paused"]
    assert triggered["recent_slots"][0] == slot and triggered["last_run_at"] == "2026-03-01T12:00:00Z"
    execution = api.get(f"{API}/executions/{slot['execution']}").json()
    assert (execution["schedule"], execution["scheduled_for"], execution["parameters"]) == (
        nightly["id"], "2026-03-01T12:00:00Z", {"n": 2})
    listed = api.get(f"{API}/executions", {"schedule": nightly["id"]}).json()
    assert [e["id"] for e in listed["results"]] == [slot["execution"]]
    assert api.get(f"{API}/executions", {"schedule": str(uuid.uuid4())}).json()["count"] == 0

    # Its execution is still active (pending: no manager took it): under "skip", a second run is not started.
    at_t0.now = T0 + datetime.timedelta(minutes=1)
    with django_capture_on_commit_callbacks():
        again = act(api, nightly["id"], "trigger").json()["triggered"]
    assert again["outcome"] == "skipped" and again["execution"] is None and slot["execution"] in again["reason"]
    assert Execution.objects.count() == 1

    resumed = act(api, nightly["id"], "resume").json()
    assert not resumed["paused"] and resumed["next_run_at"] == "2026-03-02T02:00:00Z"


def test_delete_answers_204_and_keeps_the_executions(force_api, nightly, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        execution_id = act(force_api, nightly["id"], "trigger").json()["triggered"]["execution"]
    response = force_api.delete(url(nightly["id"]))
    assert_error(response, 403, "permission_denied")  # force_execution is not delete_execution
    force_api.force_authenticate(make_user("root2", ("view_execution", "delete_execution")))
    assert force_api.delete(url(nightly["id"])).status_code == 204
    assert_error(force_api.get(url(nightly["id"])), 404, "not_found")
    execution = force_api.get(f"{API}/executions/{execution_id}").json()
    assert execution["schedule"] is None and execution["scheduled_for"] == "2026-03-01T12:00:00Z"


def test_an_unknown_id_is_404(api):
    for schedule_id in [uuid.uuid4(), "not-a-uuid"]:
        assert_error(api.get(url(schedule_id)), 404, "not_found")
        assert_error(api.patch(url(schedule_id), {"jitter": 1}, format="json"), 404, "not_found")
        assert_error(act(api, schedule_id, "pause"), 404, "not_found")


@pytest.mark.parametrize("body, status, code", [
    ({"action": "explode"}, 400, "unknown_action"),
    ({"action": 7}, 400, "invalid_parameters"),
    ({}, 400, "invalid_parameters"),
])
def test_a_bad_action_is_refused(api, nightly, body, status, code):
    assert_error(api.post(url(nightly["id"]), body, format="json"), status, code)


# --- what gets in ---------------------------------------------------------------------------------

@pytest.mark.parametrize("body, code", [
    ({"workflow_id": "nope", "interval": 60}, "unknown_workflow"),
    ({"interval": 60}, "invalid_parameters"),  # no workflow_id
    ({"workflow_id": "demo"}, "invalid_parameters"),  # no timing
    ({"workflow_id": "demo", "interval": 60, "cron": "* * * * *"}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": "60"}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": 60.5}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": 2**63}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": 60, "jitter": True}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": 60, "paused": "yes"}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": 60, "catchup_window": -1}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": 60, "parameters": [1]}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": 60, "every": "day"}, "invalid_parameters"),  # a key that is no field
    ({"workflow_id": "demo", "cron": "0 3 * * *\x00"}, "invalid_parameters"),
    ({"workflow_id": "demo", "cron": "0 3 * * *", "timezone": "\ud800"}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": 60, "parameters": {"agent": "a\x00"}}, "invalid_parameters"),
    ({"workflow_id": "demo", "interval": 60, "parameters": {"agent": "\udfff"}}, "invalid_parameters"),
])
def test_a_bad_value_is_refused_and_nothing_is_stored(api, body, code):
    assert_error(create(api, **body), 400, code)
    assert not Schedule.objects.exists()


def test_nan_is_not_json_and_a_3_mb_value_is_413(api):
    raw = '{"workflow_id": "demo", "interval": 60, "parameters": {"n": NaN}}'
    assert_error(api.post(f"{API}/schedules", raw, content_type="application/json"), 400, "parse_error")
    big = {"workflow_id": "demo", "interval": 60, "parameters": {"agent": "x" * (2 * 1024 * 1024 + 10)}}
    assert_error(create(api, **big), 413, "payload_too_large")
    huge = {"workflow_id": "demo", "interval": 60, "parameters": {"agent": "x" * (3 * 1024 * 1024)}}
    assert_error(create(api, **huge), 413, "payload_too_large")
    assert not Schedule.objects.exists()


def test_parameters_are_checked_against_the_workflow(api, monkeypatch):
    typed = register_typed(monkeypatch)
    refused = assert_error(create(api, workflow_id=typed, interval=60, parameters={"n": "three"}), 400,
                           "invalid_parameters")
    assert "parameter 'n': expected integer" in refused["message"]
    assert_error(create(api, workflow_id=typed, interval=60), 400, "invalid_parameters")
    assert create(api, workflow_id=typed, interval=60, parameters={"n": 3}).status_code == 201


# --- who may do what --------------------------------------------------------------------------------

def test_a_viewer_reads_and_may_change_nothing(client_of, nightly):
    viewer = client_of(VIEWER)
    assert viewer.get(url(nightly["id"])).status_code == 200
    assert viewer.get(f"{API}/schedules").json()["count"] == 1
    for response, permission in [
        (create(viewer, workflow_id="demo", interval=60), "add_execution"),
        (viewer.patch(url(nightly["id"]), {"jitter": 1}, format="json"), "change_execution"),
        (act(viewer, nightly["id"], "pause"), "change_execution"),
        (act(viewer, nightly["id"], "resume"), "change_execution"),
        (act(viewer, nightly["id"], "trigger"), "add_execution"),
        (viewer.delete(url(nightly["id"])), "delete_execution"),
    ]:
        assert permission in assert_error(response, 403, "permission_denied")["message"]
    assert Schedule.objects.count() == 1 and not ScheduleSlot.objects.exists() and not Execution.objects.exists()
    assert not Schedule.objects.get().paused and Schedule.objects.get().jitter == 0


def test_without_view_nothing_is_read_and_without_login_nothing_at_all(client_of, anon, nightly):
    nobody = client_of(())
    assert_error(nobody.get(f"{API}/schedules"), 403, "permission_denied")
    assert_error(nobody.get(url(nightly["id"])), 403, "permission_denied")
    assert_error(anon.get(f"{API}/schedules"), 401, "not_authenticated")
    assert_error(create(anon, workflow_id="demo", interval=60), 401, "not_authenticated")


def test_a_schedule_of_a_hidden_workflow_is_neither_listed_nor_found(api, guarded, client_of):
    superuser = client_of((), is_superuser=True)
    hidden = create(superuser, workflow_id=guarded, interval=60).json()
    assert api.get(f"{API}/schedules").json()["count"] == 0
    assert_error(api.get(url(hidden["id"])), 404, "not_found")
    assert_error(act(api, hidden["id"], "trigger"), 404, "not_found")
    assert_error(api.patch(url(hidden["id"]), {"jitter": 1}, format="json"), 404, "not_found")
    assert_error(create(api, workflow_id=guarded, interval=60), 403, "permission_denied")
    assert superuser.get(f"{API}/schedules").json()["count"] == 1


@pytest.fixture
def client_of(db):
    """``client_of(codenames, **fields)``: a schema-checked client logged in as a new user."""
    made = []

    def log_in(codenames, **fields):
        client = CheckedClient()
        client.force_authenticate(make_user(f"user{len(made)}", codenames, **fields))
        made.append(client)
        return client

    return log_in
