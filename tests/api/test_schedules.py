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


# --- what a schedule starts, and when: what starting needs ----------------------------------------

#: May view and change executions (and so schedules), not start them.
CHANGER = ("view_execution", "change_execution")


@pytest.fixture
def paused_nightly(api, at_t0):
    response = create(api, workflow_id="demo", parameters={"n": 2}, cron="0 3 * * *", paused=True)
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.parametrize("request_of", [
    pytest.param(lambda client, pk: client.patch(url(pk), {"interval": 10}, format="json"), id="interval"),
    pytest.param(lambda client, pk: client.patch(url(pk), {"cron": "* * * * *"}, format="json"), id="cron"),
    pytest.param(lambda client, pk: client.patch(url(pk), {"timezone": "Asia/Tokyo"}, format="json"), id="timezone"),
    pytest.param(lambda client, pk: client.patch(url(pk), {"parameters": {"n": 9}}, format="json"), id="parameters"),
    pytest.param(lambda client, pk: client.patch(url(pk), {"paused": False}, format="json"), id="unpause"),
    pytest.param(lambda client, pk: act(client, pk, "resume"), id="resume"),
    pytest.param(lambda client, pk: act(client, pk, "trigger"), id="trigger"),
])
def test_changing_what_a_schedule_starts_or_when_needs_what_starting_needs(client_of, paused_nightly, request_of):
    """A user who may change executions but not start them cannot make a schedule start runs
    (in the creator's name) by changing it: 403, naming add_execution, and nothing changed."""
    changer = client_of(CHANGER)
    refused = assert_error(request_of(changer, paused_nightly["id"]), 403, "permission_denied")
    assert "workflows_app.add_execution" in refused["message"] and paused_nightly["id"] in refused["message"]
    stored = Schedule.objects.get()
    assert (stored.paused, stored.next_run_at, stored.cron, stored.interval, stored.timezone, stored.parameters) == (
        True, None, "0 3 * * *", None, "UTC", {"n": 2})
    assert not ScheduleSlot.objects.exists() and not Execution.objects.exists()

    # What starting needs is enough: the same request from a user who may also start is taken.
    starter = client_of(CHANGER + ("add_execution",))
    assert request_of(starter, paused_nightly["id"]).status_code == 200


def test_pausing_and_the_fields_that_start_nothing_need_only_change_execution(client_of, nightly):
    changer = client_of(CHANGER)
    changed = changer.patch(url(nightly["id"]), {"overlap": "allow", "catchup_window": 60, "jitter": 5,
                                                 # given as they are: no change
                                                 "cron": nightly["cron"], "parameters": nightly["parameters"],
                                                 "timezone": nightly["timezone"]}, format="json")
    assert changed.status_code == 200, changed.content
    assert (changed.json()["overlap"], changed.json()["catchup_window"], changed.json()["jitter"]) == ("allow", 60, 5)
    assert changer.patch(url(nightly["id"]), {"paused": True}, format="json").json()["paused"]
    assert act(changer, nightly["id"], "pause").json()["paused"]
    assert not Execution.objects.exists()


# --- the minimum interval between two slots --------------------------------------------------------

def test_a_user_may_not_schedule_slots_closer_than_the_minimum_interval(api, nightly):
    """One POST of an every-second schedule would start 60 runs a minute past the write throttle."""
    for interval in (1, 9):
        refused = assert_error(create(api, workflow_id="demo", interval=interval), 400, "invalid_parameters")
        assert refused["message"].startswith("interval must be at least 10 seconds"), refused
        assert "minimum interval" in refused["message"] and "SCHEDULE_MIN_INTERVAL" in refused["message"]
    assert Schedule.objects.count() == 1
    refused = assert_error(api.patch(url(nightly["id"]), {"interval": 5}, format="json"), 400, "invalid_parameters")
    assert "at least 10 seconds" in refused["message"]
    assert Schedule.objects.get().cron == "0 3 * * *"

    # Ten seconds, and every minute, are far enough apart.
    assert create(api, workflow_id="demo", interval=10).status_code == 201
    assert create(api, workflow_id="demo", cron="* * * * *").status_code == 201
    assert api.patch(url(nightly["id"]), {"interval": 10}, format="json").status_code == 200


def test_the_minimum_interval_is_the_setting_schedule_min_interval(api, nightly, settings):
    settings.WORKFLOWS = {**getattr(settings, "WORKFLOWS", {}), "SCHEDULE_MIN_INTERVAL": 120}
    for body in [{"cron": "* * * * *"}, {"cron": "0,1 * * * *"}, {"cron": "* * 1 1 *"}, {"interval": 60}]:
        refused = assert_error(create(api, workflow_id="demo", **body), 400, "invalid_parameters")
        assert "at least 120 seconds" in refused["message"], refused
        assert refused["message"].startswith("cron" if "cron" in body else "interval")
    # Every minute of the 1st of January only: closer than 120 s that day, so refused whatever today is.
    refused = assert_error(api.patch(url(nightly["id"]), {"cron": "* * 1 1 *"}, format="json"), 400,
                           "invalid_parameters")
    assert "has slots 60 seconds apart" in refused["message"]
    assert Schedule.objects.count() == 1 and Schedule.objects.get().cron == "0 3 * * *"
    assert create(api, workflow_id="demo", cron="*/2 * * * *").status_code == 201
    assert create(api, workflow_id="demo", interval=120).status_code == 201


def test_a_daylight_saving_change_that_brings_two_slots_closer_is_refused(api, settings, at_t0):
    # 02:30 does not happen on Paris' last Sunday of March: it fires at 03:00 summer time, a
    # minute after 01:59 winter time.
    settings.WORKFLOWS = {**getattr(settings, "WORKFLOWS", {}), "SCHEDULE_MIN_INTERVAL": 600}
    refused = assert_error(create(api, workflow_id="demo", cron="30,59 1,2 * * *", timezone="Europe/Paris"), 400,
                           "invalid_parameters")
    assert "60 seconds apart on 2026-03-29" in refused["message"] and "at least 600 seconds" in refused["message"]
    assert create(api, workflow_id="demo", cron="30,59 1,2 * * *", timezone="UTC").status_code == 201


def test_a_superuser_is_not_held_to_the_minimum_interval_and_its_schedule_stays_editable(client_of, api, at_t0):
    superuser = client_of((), is_superuser=True)
    fast = create(superuser, workflow_id="demo", interval=1)
    assert fast.status_code == 201, fast.content
    assert superuser.patch(url(fast.json()["id"]), {"cron": "* * * * *"}, format="json").status_code == 200
    assert superuser.patch(url(fast.json()["id"]), {"interval": 2}, format="json").status_code == 200
    # Another user may change what does not move its slots; moving them keeps to the minimum.
    assert api.patch(url(fast.json()["id"]), {"parameters": {"n": 4}}, format="json").status_code == 200
    assert_error(api.patch(url(fast.json()["id"]), {"interval": 3}, format="json"), 400, "invalid_parameters")
    assert Schedule.objects.get().interval == 2
