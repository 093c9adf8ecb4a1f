"""POST /api/v1/executions/bulk: one action on every execution the filters of GET /executions
select, each through its service and permission check, answered in counts. Every response is
checked against the published schema (``CheckedClient``)."""

import datetime
import uuid

import pytest
from django.urls import resolve
from django.utils import timezone

from tests.api.conftest import API, CheckedClient, assert_error, make_user
from workflows_app.bulk import selection
from workflows_app.api.filters import ExecutionFilter
from workflows_app.models import Execution, Schedule
from workflows_app.states import ExecutionStatus, OperationState

BULK = f"{API}/executions/bulk"


def bulk(client, body, **kwargs):
    return client.post(BULK, body, format="json", **kwargs)


def status_of(execution) -> str:
    return Execution.objects.get(pk=execution.pk).status


@pytest.fixture
def fleet(make_execution, make_operation):
    """Executions of ``install`` (three started with a step running, one completed) and one of ``demo``."""
    started = []
    for n in range(3):
        execution = make_execution(status=ExecutionStatus.STARTED, workflow_id="install", deployment_id=f"site-{n}")
        make_operation(OperationState.STARTED, execution, name="busy", attempt=1)
        started.append(execution)
    return {"started": started,
            "completed": make_execution(status=ExecutionStatus.COMPLETED, workflow_id="install"),
            "other": make_execution(status=ExecutionStatus.STARTED, workflow_id="demo")}


def test_cancel_by_workflow_cancels_each_and_counts_the_skipped(api, fleet):
    response = bulk(api, {"action": "cancel", "filter": {"workflow_id": "install"}})
    assert response.status_code == 200, response.content
    assert response.json() == {
        "action": "cancel", "dry_run": False, "matched": 4, "done": 3,
        "skipped": {"count": 1, "statuses": {"completed": 1}},
        "refused": {"count": 0, "permission": 0, "status": {}, "gone": 0}, "stopped": None}
    assert [status_of(e) for e in fleet["started"]] == ["cancelling"] * 3
    assert status_of(fleet["other"]) == "started"


def test_a_dry_run_answers_the_same_counts_and_changes_nothing(api, fleet):
    dry = bulk(api, {"action": "cancel", "filter": {"workflow_id": "install"}, "dry_run": True})
    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    assert [status_of(e) for e in fleet["started"]] == ["started"] * 3
    real = bulk(api, {"action": "cancel", "filter": {"workflow_id": "install"}}).json()
    assert {**dry.json(), "dry_run": False} == real


def test_an_empty_filter_is_refused_unless_all_is_asked_for(api, fleet):
    for body in ({"action": "cancel", "filter": {}}, {"action": "cancel", "filter": {"all": False}}):
        body = assert_error(bulk(api, body), 400, "invalid_parameters")
        assert body["message"] == 'filter: give at least one filter, or "all": true to act on every execution'
    assert status_of(fleet["other"]) == "started"
    everything = bulk(api, {"action": "cancel", "filter": {"all": True}})
    assert everything.json()["matched"] == 5 and everything.json()["done"] == 4
    assert status_of(fleet["other"]) == "cancelled", "no step ran: it ends cancelled at once"


@pytest.mark.parametrize("body, says", [
    ({"action": "cancel", "filter": {"workflow": "install"}}, "filter.workflow: This field is not accepted."),
    ({"action": "cancel", "filter": {"ordering": "-created_at"}}, "filter.ordering: This field is not accepted."),
    ({"action": "cancel", "filter": {"status": "done"}}, 'filter.status: "done" is not a valid choice.'),
    ({"action": "cancel", "filter": {"workflow_id": ""}}, "filter.workflow_id: This field may not be blank."),
    ({"action": "cancel", "filter": {"workflow_id": 7}}, "filter.workflow_id: Not a valid string."),
    ({"action": "cancel", "filter": {"created_before": "yesterday"}},
     "filter.created_before is not valid: Enter a valid date/time."),
    ({"action": "cancel", "filter": {"parent": "nope"}}, "filter.parent is not valid: Enter a valid UUID."),
    ({"action": "cancel", "filter": "install"}, "filter: Invalid data. Expected a dictionary, but got str."),
    ({"action": "cancel"}, "filter: This field is required."),
    ({"filter": {"all": True}}, "action: This field is required."),
    ({"action": "cancel", "filter": {"all": "yes"}}, "filter.all: Must be a valid boolean."),
    ({"action": "cancel", "filter": {"all": True}, "dry-run": True}, "dry-run: This field is not accepted."),
])
def test_bad_input_is_a_400_naming_what_is_wrong_and_nothing_is_done(api, fleet, body, says):
    assert assert_error(bulk(api, body), 400, "invalid_parameters")["message"] == says
    assert [status_of(e) for e in fleet["started"]] == ["started"] * 3


def test_an_unknown_action_is_a_400_unknown_action(api, fleet):
    body = assert_error(bulk(api, {"action": "explode", "filter": {"all": True}}), 400, "unknown_action")
    assert body["message"].startswith("unknown action 'explode': one of cancel, force-cancel, kill")


def test_unauthenticated_is_401_and_an_action_the_user_may_not_take_at_all_403(anon, api, fleet):
    assert_error(bulk(anon, {"action": "cancel", "filter": {"all": True}}), 401, "not_authenticated")
    body = assert_error(bulk(api, {"action": "kill", "filter": {"all": True}}), 403, "permission_denied")
    assert "workflows_app.force_execution" in body["message"]
    assert [status_of(e) for e in fleet["started"]] == ["started"] * 3


def test_executions_of_a_workflow_hidden_from_the_user_are_not_selected(api, guarded, make_execution, fleet):
    """They are not found one at a time either: counting them would say that they exist."""
    secret = make_execution(status=ExecutionStatus.STARTED, workflow_id=guarded)
    answer = bulk(api, {"action": "cancel", "filter": {"status": "started"}}).json()
    assert (answer["matched"], answer["done"], answer["refused"]["count"]) == (4, 4, 0)
    assert status_of(secret) == "started"
    assert bulk(api, {"action": "cancel", "filter": {"workflow_id": guarded}}).json()["matched"] == 0


def test_a_user_who_may_act_but_not_view_gets_an_acknowledgement(db, fleet):
    client = CheckedClient()
    client.force_authenticate(make_user("blind", ("change_execution",)))
    response = bulk(client, {"action": "cancel", "filter": {"workflow_id": "install"}})
    assert response.status_code == 200 and set(response.json()) == {"id", "message"}
    assert "workflows_app.view_execution" in response.json()["message"]
    assert [status_of(e) for e in fleet["started"]] == ["cancelling"] * 3


def test_the_filters_select_what_the_list_lists(api, make_execution):
    """The same FilterSet, so the same executions: GET's count is the bulk action's match."""
    parent = make_execution(status=ExecutionStatus.COMPLETED, workflow_id="install")
    schedule = Schedule.objects.create(workflow_id="install", cron="0 3 * * *")
    old = timezone.now() - datetime.timedelta(days=3)
    make_execution(status=ExecutionStatus.FAILED, workflow_id="install", deployment_id="a", parent=parent,
                   concurrency_key='install:site="a"', schedule=schedule)
    make_execution(status=ExecutionStatus.STARTED, workflow_id="demo", deployment_id="a", rerun_of=parent)
    Execution.objects.filter(pk=make_execution(workflow_id="install").pk).update(created_at=old)
    cut = (timezone.now() - datetime.timedelta(days=1)).isoformat()
    for filters in [{"status": "failed"}, {"workflow_id": "install"}, {"deployment_id": "a"},
                    {"concurrency_key": 'install:site="a"'}, {"parent": str(parent.pk)}, {"rerun_of": str(parent.pk)},
                    {"schedule": str(schedule.pk)}, {"created_before": cut}, {"created_after": cut},
                    {"workflow_id": "install", "created_after": cut}, {"parent": str(uuid.uuid4())}]:
        listed = api.get(f"{API}/executions", filters).json()["count"]
        matched = bulk(api, {"action": "cancel", "filter": filters, "dry_run": True}).json()["matched"]
        assert matched == listed, filters
    assert set(selection.FILTERS) == set(ExecutionFilter.base_filters) - {"ordering"}


def test_pause_and_any_other_action_of_the_services_is_taken(api, fleet):
    answer = bulk(api, {"action": "pause", "filter": {"workflow_id": "install", "status": "started"}}).json()
    assert answer["done"] == 3 and [status_of(e) for e in fleet["started"]] == ["paused"] * 3


def test_the_path_answers_with_a_trailing_slash_and_commits_each_action_on_its_own(api, fleet):
    assert bulk(api, {"action": "cancel", "filter": {"deployment_id": "site-1"}}).json()["done"] == 1
    response = api.post(f"{BULK}/", {"action": "cancel", "filter": {"deployment_id": "site-2"}}, format="json")
    assert response.json()["done"] == 1
    assert_error(api.get(BULK), 405, "method_not_allowed")
    # A project's ATOMIC_REQUESTS would hold every row lock, and every message, until the last one.
    assert "default" in resolve(BULK).func._non_atomic_requests
