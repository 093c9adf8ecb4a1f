"""POST /api/v1/executions/{id}: cancel, force-cancel, kill, resume, force-resume, pause, unpause; POST
/api/v1/workflows/{id}: pause and unpause a workflow as a whole."""

import uuid

import pytest

from tests.api.conftest import API, assert_error
from workflows_app.models import Execution, Operation
from workflows_app.states import ExecutionStatus, OperationState

FORCE_ACTIONS = ["kill", "force-cancel", "force-resume"]


def act(client, execution, body, **kwargs):
    return client.post(f"{API}/executions/{execution.pk}", body, format="json", **kwargs)


def states(execution):
    return dict(Operation.objects.filter(execution=execution).values_list("name", "state"))


def test_cancel_moves_a_started_execution_to_cancelling_and_answers_it_re_read(api, running):
    response = act(api, running, {"action": "cancel"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "cancelling" == Execution.objects.get(pk=running.pk).status
    assert body["operations_summary"]["cancelled"] == 1 and body["operations_summary"]["started"] == 1
    assert states(running) == {"done": "succeeded", "busy": "started", "next": "cancelled"}


def test_cancel_of_a_pending_execution_ends_it_cancelled_at_once(api, make_execution):
    execution = make_execution(status=ExecutionStatus.PENDING)
    assert act(api, execution, {"action": "cancel"}).json()["status"] == "cancelled"


def test_force_cancel_with_the_permission_ends_it_cancelled(force_api, running):
    response = act(force_api, running, {"action": "force-cancel"})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"
    assert states(running) == {"done": "succeeded", "busy": "cancelled", "next": "cancelled"}


def test_kill_with_the_permission_ends_it_cancelled_and_signals_the_workers(force_api, running, kill_broadcasts):
    response = act(force_api, running, {"action": "kill"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "cancelled"
    assert body["operations_summary"] == {**dict.fromkeys([s.value for s in OperationState], 0),
                                          "succeeded": 1, "cancelled": 2}
    assert kill_broadcasts and kill_broadcasts[0][0] == str(running.pk)
    stored = Execution.objects.get(pk=running.pk)
    assert stored.token_hash != "a" * 64, "a kill renews the token"
    assert stored.token_hash not in response.content.decode() and "token" not in body


@pytest.mark.parametrize("status", ["cancelled", "failed"])
def test_resume_and_force_resume_start_an_ended_execution_again(api, force_api, make_execution, make_operation,
                                                                 status):
    for client, action in [(api, "resume"), (force_api, "force-resume")]:
        execution = make_execution(status=status)
        make_operation(OperationState.FAILED, execution)
        response = act(client, execution, {"action": action})
        assert response.status_code == 200, response.content
        assert response.json()["status"] == "started" == Execution.objects.get(pk=execution.pk).status
        summary = response.json()["operations_summary"]
        assert (summary["failed"], summary["sending"]) == (0, 1), "the failed step is reset and sent again"


@pytest.mark.parametrize("action", FORCE_ACTIONS)
def test_the_force_actions_need_the_force_permission(api, make_execution, action):
    execution = make_execution(status=ExecutionStatus.FAILED if action == "force-resume" else ExecutionStatus.STARTED)
    body = assert_error(act(api, execution, {"action": action}), 403, "permission_denied")
    assert "workflows_app.force_execution" in body["message"]
    assert Execution.objects.get(pk=execution.pk).status == execution.status, "nothing changed"


@pytest.mark.parametrize("action", ["cancel", "resume"])
def test_cancel_and_resume_need_no_force_permission(api, make_execution, action):
    execution = make_execution(status=ExecutionStatus.STARTED)
    assert act(api, execution, {"action": action}).status_code == 200


@pytest.mark.parametrize("action, status", [
    ("cancel", "completed"), ("cancel", "cancelling"), ("cancel", "failed"),
    ("force-cancel", "completed"), ("force-cancel", "kill_cancelling"), ("force-cancel", "timed_out"),
    ("resume", "completed"), ("resume", "pending"), ("resume", "timed_out"),
    ("force-resume", "started"), ("force-resume", "completed"), ("force-resume", "queued"),
])
def test_an_action_the_status_does_not_allow_is_invalid_transition_and_changes_nothing(force_api, make_execution,
                                                                                       action, status):
    execution = make_execution(status=status)
    body = assert_error(act(force_api, execution, {"action": action}), 409, "invalid_transition")
    assert f"cannot {action} execution {execution.pk}" in body["message"]
    assert Execution.objects.get(pk=execution.pk).status == status


def test_kill_of_an_ended_execution_answers_it_unchanged(force_api, make_execution):
    execution = make_execution(status=ExecutionStatus.COMPLETED)
    response = act(force_api, execution, {"action": "kill"})
    assert response.status_code == 200 and response.json()["status"] == "completed"


@pytest.mark.parametrize("body", [{}, {"action": None}, {"action": 1}, {"action": ["cancel"]}, {"action": True},
                                  {"action": "cancel", "force": True}, [], "cancel", None, 3])
def test_a_missing_or_non_string_action_is_invalid_parameters(api, running, body):
    assert_error(act(api, running, body), 400, "invalid_parameters")
    assert Execution.objects.get(pk=running.pk).status == ExecutionStatus.STARTED


@pytest.mark.parametrize("action", ["stop", "", "Cancel", "force_cancel", "cancel ", "a\x00"])
def test_another_string_is_unknown_action(api, running, action):
    response = act(api, running, {"action": action})
    if "\x00" in action:
        assert_error(response, 400, "invalid_parameters")
    else:
        assert "cancel, force-cancel, kill, resume, force-resume, pause, unpause" in assert_error(response, 400, "unknown_action")[
            "message"]
    assert Execution.objects.get(pk=running.pk).status == ExecutionStatus.STARTED


@pytest.mark.parametrize("execution_id", [uuid.uuid4(), "not-a-uuid"])
def test_an_action_on_an_unknown_execution_is_not_found(force_api, db, execution_id):
    response = force_api.post(f"{API}/executions/{execution_id}", {"action": "kill"}, format="json")
    assert_error(response, 404, "not_found")


# --- pause and unpause ---------------------------------------------------------------------------

def test_pause_and_unpause_need_no_force_permission_and_answer_the_execution(api, running):
    response = act(api, running, {"action": "pause"})
    assert response.status_code == 200 and response.json()["status"] == "paused", response.content
    assert act(api, running, {"action": "unpause"}).json()["status"] == "started"
    assert Execution.objects.get(pk=running.pk).status == "started"


@pytest.mark.parametrize("action, status", [("pause", "paused"), ("pause", "pending"), ("pause", "completed"),
                                            ("unpause", "started"), ("unpause", "cancelling")])
def test_a_pause_or_unpause_the_status_does_not_allow_is_invalid_transition(api, make_execution, action, status):
    execution = make_execution(status=status)
    body = assert_error(act(api, execution, {"action": action}), 409, "invalid_transition")
    assert f"cannot {action} execution {execution.pk}: it is {status}" in body["message"]
    assert Execution.objects.get(pk=execution.pk).status == status


def act_on_workflow(client, workflow_id, body):
    return client.post(f"{API}/workflows/{workflow_id}", body, format="json")


def test_a_workflow_is_paused_and_unpaused_as_a_whole(api):
    response = act_on_workflow(api, "demo", {"action": "pause"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["workflow_id"], body["paused"], body["paused_by"], body["started"]) == ("demo", True, "alice", None)
    listed = {w["name"]: w["paused"] for w in api.get(f"{API}/workflows", {"limit": 1000}).json()["results"]}
    assert listed["demo"] is True and not any(paused for name, paused in listed.items() if name != "demo")
    assert_error(act_on_workflow(api, "demo", {"action": "pause"}), 409, "invalid_transition")
    body = act_on_workflow(api, "demo", {"action": "unpause"}).json()
    assert (body["paused"], body["started"]) == (False, 0)
    assert_error(act_on_workflow(api, "demo", {"action": "unpause"}), 409, "invalid_transition")


def test_a_workflow_action_is_refused_clearly(api, client):
    assert_error(act_on_workflow(api, "no_such_workflow", {"action": "pause"}), 404, "not_found")
    assert "pause, unpause" in assert_error(act_on_workflow(api, "demo", {"action": "cancel"}), 400,
                                            "unknown_action")["message"]
    assert_error(act_on_workflow(api, "demo", {"action": "pause", "extra": 1}), 400, "invalid_parameters")
    assert client.post(f"{API}/workflows/demo", {"action": "pause"}, content_type="application/json").status_code in (401, 403)
