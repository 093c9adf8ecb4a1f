"""Every door a JSON value comes in by goes through the one value check (``workflows_app.values``),
on the database the suite runs on (CI: PostgreSQL and SQLite, which refused different things
before): the REST API, the admin's start form, the commands, workflow code (payload, a step's
arguments, a reason), an operation's result, error and log. A refused value is a clear error at
its door and stores nothing; in workflow or operation code it fails the execution or the
operation naming why, never leaves it stuck; and every page that shows what was stored answers.

The dispatcher runs in this process (``services.start`` then ``dispatcher.run_pass``, as a manager
would), the agent's reports are made here; tests/integration/test_values.py does the same with
a real manager and agent.
"""

import json
import sys

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from agents.runner import OperationContext
from agents.worker import local
from tests.workflows import UNSTORABLE_TEXT, bad_value
from workflows_app import services, values
from workflows_app.engine import reports
from workflows_app.errors import ValueRefused
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import ExecutionStatus, OperationState
from tests.engine.passes import run_pass

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outbox")]
#: The tests of workflow code run with every pass replaying it, and with a live run kept.
in_workflow_code = pytest.mark.usefixtures("each_pass")

API = "/api/v1"
BAD = ["surrogate", "nul", "nan", "deep", "large"]
#: The JSON text of each bad value, as a client would send it (NaN: what Python's json writes).
BAD_JSON = {
    "surrogate": '{"file": "report-\\udcff.csv"}',
    "nul": '{"text": "a\\u0000b"}',
    "nan": '{"ratio": NaN}',
    "deep": "[" * 900 + "]" * 900,
    "large": json.dumps({"blob": "x" * 20000}),
}
#: Small enough for the "large" value above to pass it (a 3 MB body is another door: Django's limit).
SMALL_LIMIT = {"MAX_PAYLOAD_BYTES": 8192}


@pytest.fixture(autouse=True)
def with_the_test_workflows_and_a_small_limit():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"], WORKFLOWS=SMALL_LIMIT):
        yield


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", password="pw")


@pytest.fixture
def api(superuser):
    client = APIClient()
    client.force_authenticate(superuser)
    return client


def produce(execution) -> Operation:
    """The step ``produce``, claimed by its agent (test set-up: the state a claim leaves)."""
    operation = Operation.objects.get(execution_id=execution.pk, name="produce")
    Operation.objects.filter(pk=operation.pk).update(state=OperationState.STARTED, started_at=timezone.now())
    operation.refresh_from_db()
    return operation


def assert_every_page_answers(api, client, execution):
    """What broke before: the lists, the operations, the events, the admin's pages."""
    for url in (f"{API}/executions", f"{API}/executions/{execution.pk}", f"{API}/executions/{execution.pk}/operations",
                f"{API}/executions/{execution.pk}/graph", f"{API}/events?execution_id={execution.pk}"):
        assert api.get(url).status_code == 200, url
    for url in (reverse("admin:workflows_app_execution_changelist"),
                reverse("admin:workflows_app_execution_change", args=[execution.pk]),
                reverse("admin:workflows_app_event_changelist"), reverse("admin:workflows_app_operation_changelist")):
        assert client.get(url).status_code == 200, url
    for operation in Operation.objects.filter(execution_id=execution.pk):
        assert client.get(reverse("admin:workflows_app_operation_change", args=[operation.pk])).status_code == 200


# --- workflow and operation code ------------------------------------------------------------------

@in_workflow_code
@pytest.mark.parametrize("kind", BAD)
def test_an_operation_result_that_cannot_be_stored_fails_it_for_good_naming_why(kind, api, client, superuser):
    execution = run_pass(services.start("it_bad_value", {"where": "result", "kind": kind}))
    operation = produce(execution)

    reports.record_success(operation, operation.attempt, bad_value(kind))

    operation.refresh_from_db()
    assert operation.state == OperationState.FAILED, "not retried: the same code gives the same result"
    assert (operation.current_retries, operation.max_retries) == (0, 3)
    assert operation.error["type"] == "ValueRefused" and "the operation's result" in operation.error["message"]
    assert operation.result is None
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.FAILED, "never left waiting for a result that cannot come"
    assert "produce" in execution.error
    client.force_login(superuser)
    assert_every_page_answers(api, client, execution)


@in_workflow_code
@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("where, refused", [("payload", "payload"), ("arguments", "step 'produce' args")])
def test_a_payload_or_step_arguments_that_cannot_be_stored_fail_the_execution_storing_nothing(
        where, refused, kind, api, client, superuser):
    execution = run_pass(services.start("it_bad_value", {"where": where, "kind": kind}))

    assert execution.status == ExecutionStatus.FAILED
    assert f"ValueRefused: {refused}" in execution.error
    assert execution.payload == {}, "nothing of it stored"
    assert not Operation.objects.filter(execution_id=execution.pk).exists()
    client.force_login(superuser)
    assert_every_page_answers(api, client, execution)


@in_workflow_code
def test_an_error_quoting_unstorable_text_is_stored_cleaned_and_the_step_retried(api, client, superuser):
    """What an exception says is not refused: a failure must always be recorded."""
    execution = run_pass(services.start("it_bad_value", {"where": "error", "kind": "ok"}))
    operation = produce(execution)

    reports.record_failure(operation, operation.attempt, {"type": "RecoverableError", "message": UNSTORABLE_TEXT,
                                                          "traceback": "Traceback:\n" + UNSTORABLE_TEXT},
                           retryable=True)

    operation.refresh_from_db()
    assert operation.state == OperationState.RESCHEDULED
    assert operation.error["message"] == values.clean_text(UNSTORABLE_TEXT) == "x-\\udcff \\x00 end"
    assert Event.objects.filter(execution_id=execution.pk, type="task_rescheduled", message="x-\\udcff \\x00 end").exists()
    client.force_login(superuser)
    assert_every_page_answers(api, client, execution)


@in_workflow_code
def test_a_reason_quoting_unstorable_text_ends_the_execution_with_it_cleaned():
    execution = run_pass(services.start("it_bad_value", {"where": "reason", "kind": "ok"}))

    assert execution.status == ExecutionStatus.FAILED
    assert execution.error == "gave up on x-\\udcff \\x00 end"


@in_workflow_code
def test_log_data_that_cannot_be_stored_is_refused_in_the_operation_and_nothing_logged(agent_link, monkeypatch):
    execution = run_pass(services.start("it_bad_value", {"where": "log", "kind": "ok"}))
    step = produce(execution)
    monkeypatch.setenv(local.NAME_ENV, step.agent)
    context = OperationContext(step.pk, step.attempt, {"execution": str(execution.pk), "step": step.name})

    with pytest.raises(ValueRefused, match="the log's data.listing.file: lone surrogates"):
        context.log("listing", listing=bad_value("surrogate"))
    context.log("listing " + UNSTORABLE_TEXT, count=2)

    logs = list(Event.objects.filter(execution_id=execution.pk, type="log", operation="produce").values_list("message", "data"))
    assert logs == [("listing x-\\udcff \\x00 end", {"count": 2})]


# --- the REST API --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", BAD)
def test_the_api_refuses_parameters_and_event_payloads_that_cannot_be_stored(kind, api):
    started = api.post(f"{API}/executions", f'{{"workflow_id": "it_bad_value", "parameters": '
                                            f'{{"where": "x", "kind": {BAD_JSON[kind]}}}}}', content_type="application/json")
    waiting = services.start("it_bad_value", {"where": "x", "kind": "ok"})
    event = api.post(f"{API}/executions/{waiting.pk}/events", f'{{"name": "go", "payload": {BAD_JSON[kind]}}}',
                     content_type="application/json")

    for response in (started, event):
        expected = {"nan": (400, "parse_error"), "large": (413, "payload_too_large")}.get(kind, (400, "invalid_parameters"))
        assert (response.status_code, response.json()["error_code"]) == expected, response.json()
    assert Execution.objects.count() == 1 and not Event.objects.filter(type="event_received").exists()
    assert api.get(f"{API}/executions").status_code == 200 and api.get(f"{API}/events").status_code == 200


def test_the_api_names_the_place_of_a_refused_value(api):
    response = api.post(f"{API}/executions", {"workflow_id": "it_bad_value", "parameters": {
        "where": "x", "kind": {"servers": [{"name": "ok"}, {"name": "a\x00b"}]}}}, format="json")

    assert response.json() == {"error_code": "invalid_parameters",
                               "message": "parameters.kind.servers[1].name: null characters (\\u0000) are not allowed"}


# --- the admin's start form ------------------------------------------------------------------------

@pytest.mark.parametrize("text, says", [
    ('{"where": "x", "kind": "\\ud800"}', "lone surrogates"),
    ('{"where": "x", "kind": "a\\u0000"}', "null characters"),
    ('{"where": "x", "kind": NaN}', "NaN is not valid JSON"),
    ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
])
def test_the_admin_start_form_refuses_what_cannot_be_stored_with_a_form_error(text, says, client, superuser):
    client.force_login(superuser)

    response = client.post(reverse("admin:workflows_app_execution_add"),
                           {"workflow": "it_bad_value", "parameters": text, "if_busy": "refuse"})

    assert response.status_code == 200
    assert says in response.content.decode()
    assert not Execution.objects.exists()


def test_the_admin_start_form_refuses_a_value_over_the_limit(client, superuser):
    client.force_login(superuser)

    response = client.post(reverse("admin:workflows_app_execution_add"), {
        "workflow": "it_bad_value", "parameters": json.dumps({"where": "x", "kind": "x" * 20000}), "if_busy": "refuse"})

    assert response.status_code == 200 and "more than the 8192 allowed" in response.content.decode()
    assert not Execution.objects.exists()


# --- the commands --------------------------------------------------------------------------------

@pytest.mark.parametrize("param, says", [
    ('kind="\\ud800"', "parameters.kind: lone surrogates"),
    ("kind=" + os_name if (os_name := "report-\udcff.csv") else "", "parameters.kind: lone surrogates"),
    ('kind="a\\u0000"', "parameters.kind: null characters"),
    ("kind=NaN", "--param kind: NaN is not valid JSON"),
    # Python's json cannot parse it before 3.13 (--param says so); 3.13's can, and the check of
    # the parameters refuses it, naming where.
    ("kind=" + "[" * 5000 + "]" * 5000, "--param kind: nested deeper than 64 levels" if sys.version_info < (3, 13)
     else "[0][0]: nested deeper than 64 levels"),
    ("kind=" + json.dumps("x" * 20000), "more than the 8192 allowed"),
])
def test_start_execution_refuses_parameters_that_cannot_be_stored_in_one_line(param, says):
    with pytest.raises(CommandError) as refused:
        call_command("start_execution", "it_bad_value", "--param", "where=x", "--param", param)

    assert says in str(refused.value) and "\n" not in str(refused.value)
    assert values.string_problem(str(refused.value)) is None
    assert not Execution.objects.exists()


@pytest.mark.parametrize("payload, says", [
    ("[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
    ('{"a": "\\udcff"}', "payload.a: lone surrogates"),
    ("Infinity", "Infinity is not valid JSON"),
])
def test_send_event_refuses_a_payload_that_cannot_be_stored_in_one_line(payload, says):
    execution = services.start("it_bad_value", {"where": "x", "kind": "ok"})

    with pytest.raises(CommandError, match=says):
        call_command("send_event", str(execution.pk), "go", "--payload", payload)

    assert not Event.objects.filter(type="event_received").exists()
