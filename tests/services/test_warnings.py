"""``queries.warnings``: what an operator should know of an execution that its status does not
say — steps sent to an agent that never came (``unknown_agent``) — and the ``warnings`` of the
execution's document (``GET /executions/{id}``, the actions' answers, the commands' ``--json``),
which the lists leave out. ``--wait`` showing them: ``tests/commands/test_commands.py`` and
``tests/integration/test_commands_cli.py``."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent
from tests.api.conftest import API, OPERATOR, PERMISSION_QUERIES, CheckedClient, make_user
from workflows_app import queries
from workflows_app.states import ExecutionStatus, OperationState, StepKind

OFFLINE_AFTER = 60


@pytest.fixture
def execution(make_execution):
    return make_execution(status=ExecutionStatus.STARTED)


@pytest.fixture
def step(make_operation, execution):
    """Add a step of ``execution`` in ``state`` sent to ``agent``."""
    def make(name, agent, state=OperationState.SENT, **fields):
        return make_operation(state, execution, name=name, agent=agent, **fields)

    return make


def beat(name, seconds_ago):
    """An agent whose last heartbeat was ``seconds_ago`` seconds ago (None: never)."""
    last = None if seconds_ago is None else timezone.now() - timedelta(seconds=seconds_ago)
    return Agent.objects.create(name=name, last_heartbeat=last)


def test_a_step_sent_to_an_agent_never_seen_is_one_warning(execution, step):
    step("deploy", "nowhere")
    assert queries.warnings(execution.pk) == [{
        "code": "unknown_agent", "step": "deploy",
        "message": "step 'deploy' waits for agent 'nowhere', which has never been seen"}]
    assert queries.warnings(str(execution.pk)) == queries.warnings(execution.pk)  # its id as text too


def test_a_step_sent_to_an_agent_offline_for_longer_than_the_setting_is_one_warning(execution, step):
    agent = beat("host-1", OFFLINE_AFTER + 30)
    step("deploy", "host-1", OperationState.SENDING)
    [warning] = queries.warnings(execution.pk)
    assert warning["code"] == "unknown_agent" and warning["step"] == "deploy"
    assert warning["message"] == (f"step 'deploy' waits for agent 'host-1', which has been offline since "
                                  f"{agent.last_heartbeat:%Y-%m-%d %H:%M:%S} UTC (no heartbeat for more than 60s)")


def test_an_agent_online_or_offline_is_what_agent_offline_after_seconds_says(execution, step):
    beat("host-1", 30)
    step("deploy", "host-1")
    assert queries.warnings(execution.pk) == []  # online: the step is about to start
    with override_settings(WORKFLOWS={"AGENT_OFFLINE_AFTER_SECONDS": 10}):
        [warning] = queries.warnings(execution.pk)
    assert "offline since" in warning["message"] and "more than 10s" in warning["message"]


def test_an_agent_row_without_a_heartbeat_was_never_seen(execution, step):
    beat("host-1", None)
    step("deploy", "host-1")
    assert queries.warnings(execution.pk)[0]["message"].endswith("which has never been seen")


def test_steps_that_wait_for_no_agent_warn_of_nothing(execution, step, make_execution, make_operation):
    step("on-a-manager", "management")
    step("child", "", kind=StepKind.WORKFLOW)
    for state in (OperationState.PENDING, OperationState.STARTED, OperationState.RESCHEDULED,
                  OperationState.SUCCEEDED, OperationState.FAILED, OperationState.CANCELLED):
        step(f"{state}-step", "nowhere", state)  # not (or no longer) waiting for the agent to take it
    make_operation(OperationState.SENT, make_execution(), name="elsewhere", agent="nowhere")  # another execution's
    assert queries.warnings(execution.pk) == []
    with override_settings(WORKFLOWS={"MANAGEMENT_QUEUE": "managers"}):
        assert [w["step"] for w in queries.warnings(execution.pk)] == ["on-a-manager"]  # now a queue like any other


def test_several_steps_waiting_for_one_agent_are_one_warning_that_counts_them(execution, step):
    for name in ("c", "a", "b"):
        step(name, "nowhere")
    step("d", "gone")
    step("e", "gone", OperationState.SENDING)
    beat("gone", 3600)
    step("f", "host-1")
    beat("host-1", 0)
    step("g", "lost")
    found = queries.warnings(execution.pk)
    assert [(w["step"], w["message"].split(",")[0]) for w in found] == [
        ("d", "step 'd' and 1 other step wait for agent 'gone'"),
        ("g", "step 'g' waits for agent 'lost'"),
        ("a", "step 'a' and 2 other steps wait for agent 'nowhere'"),
    ]


def test_warnings_are_three_queries_however_many_steps_and_agents(execution, step):
    for i in range(40):
        step(f"s{i:02d}", f"agent-{i % 8}")
        if i < 8:
            beat(f"agent-{i}", 0 if i % 2 else 3600)
    with CaptureQueriesContext(connection) as counted:
        assert len(queries.warnings(execution.pk)) == 4
    assert len(counted) == 3, [q["sql"] for q in counted]  # two of the agents', one of the limits


# --- the execution's document -------------------------------------------------------------------

@pytest.fixture
def api(db):
    """An operator; every response checked against the published schema."""
    client = CheckedClient()
    client.force_authenticate(make_user("ops", OPERATOR))
    return client


def test_the_execution_document_has_its_warnings(api, execution, step):
    step("deploy", "nowhere")
    step("other", "host-1")
    beat("host-1", 0)
    body = api.get(f"{API}/executions/{execution.pk}").json()
    assert body["warnings"] == queries.warnings(execution.pk) == [{
        "code": "unknown_agent", "step": "deploy",
        "message": "step 'deploy' waits for agent 'nowhere', which has never been seen"}]
    Agent.objects.create(name="nowhere", last_heartbeat=timezone.now())  # it came
    assert api.get(f"{API}/executions/{execution.pk}").json()["warnings"] == []


def test_a_document_without_a_step_sent_looks_for_no_warning(api, execution, step, django_assert_num_queries):
    step("later", "nowhere", OperationState.PENDING)
    with django_assert_num_queries(2 + PERMISSION_QUERIES):  # the execution, its counts: nothing sent, no look
        assert api.get(f"{API}/executions/{execution.pk}").json()["warnings"] == []


def test_the_list_leaves_the_warnings_out_and_costs_what_it_did(api, execution, step, django_assert_num_queries):
    for i in range(5):
        step(f"s{i}", "nowhere")
    with django_assert_num_queries(2 + PERMISSION_QUERIES):  # a count and a page, as without warnings
        results = api.get(f"{API}/executions").json()["results"]
    assert [row["id"] for row in results] == [str(execution.pk)] and "warnings" not in results[0]
