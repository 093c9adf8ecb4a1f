"""GET /api/v1/metrics: Prometheus' text format, its numbers, who may scrape and what each sees,
and the Grafana dashboard of docs/ built on its series.

The numbers come from executions the test harness (the ``switchyard`` fixture) runs with its own
clock, so that every duration is known, and from rows made directly where a state is hard to
reach in a test (a time in a queue, a schedule left due). Every scrape is parsed with
prometheus_client's own parser. The broker's queue of reports is counted in
tests/integration/test_metrics.py; here nothing of the test reaches a queue.
"""

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core import checks
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import Agent
from tests.api import metrics_workflows
from tests.api.conftest import API, GUARDED, VIEWER, CheckedClient, assert_error, make_user, openapi
from workflows_app import broker, clock, metrics
from workflows_app.models import Schedule
from workflows_app.states import ExecutionStatus, OperationState

ROOT = Path(__file__).resolve().parents[2]
METRICS = f"{API}/metrics"
TOKEN = "s3cret-scrape-token-0123456789"
#: What Prometheus 3 sends.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
                     "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
                     "text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
FAMILIES = {
    "switchyard_executions": "gauge", "switchyard_operations": "gauge",
    "switchyard_execution_duration_seconds": "histogram", "switchyard_operation_duration_seconds": "histogram",
    "switchyard_operation_queue_seconds": "histogram", "switchyard_agents_online": "gauge",
    "switchyard_schedule_lateness_seconds": "gauge", "switchyard_concurrency_queued": "gauge",
    "switchyard_operations_waiting": "gauge", "switchyard_reports_waiting": "gauge",
}


@pytest.fixture(autouse=True)
def with_the_metrics_workflows(monkeypatch):
    # Nothing of these tests reaches a queue of the broker: what one holds is someone else's.
    monkeypatch.setattr(broker, "waiting_messages", lambda queue: 0)
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.api.metrics_workflows"]):
        yield


@pytest.fixture
def token_settings():
    with override_settings(WORKFLOWS={"METRICS_TOKEN": TOKEN}):
        yield TOKEN


class Scrape:
    """A scrape, parsed: ``families`` by name, and ``value(name, **labels)`` of one sample."""

    def __init__(self, text):
        self.text = text
        self.families = {family.name: family for family in text_string_to_metric_families(text)}
        self.samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                        for family in self.families.values() for sample in family.samples}

    def value(self, name, **labels):
        return self.samples[(name, tuple(sorted((key, str(value)) for key, value in labels.items())))]

    def labelled(self, name, label):
        """The values of ``label`` among the samples of ``name``."""
        return {dict(labels)[label] for sample, labels in self.samples if sample == name and label in dict(labels)}

    def histogram(self, name, **labels):
        """``({le: cumulative count}, count, sum)`` of one histogram."""
        buckets = {dict(key)["le"]: value for (sample, key), value in self.samples.items()
                   if sample == f"{name}_bucket" and {k: v for k, v in key if k != "le"} == labels}
        return buckets, self.value(f"{name}_count", **labels), self.value(f"{name}_sum", **labels)


def scrape(client, **headers) -> Scrape:
    response = client.get(METRICS, **headers)
    assert response.status_code == 200, (response.status_code, response.content[:500])
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    return Scrape(response.content.decode())


def token_client(token=TOKEN) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def user_client(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def viewer(db):
    return make_user("viewer", VIEWER)


# --- the numbers -------------------------------------------------------------------------------

def test_a_scrape_counts_and_times_the_executions_and_operations_that_ran(switchyard, viewer):
    metrics_workflows.CLOCK = switchyard.clock
    # Execution durations (start to end): 92 s, 40 s, 0.3 s; operation durations: 2, 40, 0.3 s.
    assert switchyard.run("metrics_job", {"sleep": 90, "seconds": 2}).status == "completed"
    assert switchyard.run("metrics_job", {"seconds": 40}).status == "completed"
    assert switchyard.run("metrics_job", {"seconds": 0.3, "fail": True}).status == "failed"
    waiting = switchyard.start("metrics_waiting")
    cancelled = switchyard.cancel(switchyard.start("metrics_waiting"))
    assert (waiting.status, cancelled.status) == ("started", "cancelled")

    found = scrape(user_client(viewer))

    assert {name: family.type for name, family in found.families.items()} == FAMILIES
    expected = {("metrics_job", "completed"): 2, ("metrics_job", "failed"): 1,
                ("metrics_waiting", "started"): 1, ("metrics_waiting", "cancelled"): 1}
    for workflow in ("metrics_job", "metrics_waiting"):
        for status in ExecutionStatus.values:  # every status, zeros included
            assert found.value("switchyard_executions", workflow=workflow, status=status) == \
                expected.get((workflow, status), 0), (workflow, status)
    assert {state: found.value("switchyard_operations", state=state) for state in OperationState.values} == {
        **dict.fromkeys(OperationState.values, 0), "succeeded": 2, "failed": 1}

    buckets, count, total = found.histogram("switchyard_execution_duration_seconds", workflow="metrics_job")
    assert count == 3 and total == pytest.approx(132.3, abs=0.01)
    assert buckets == {"1.0": 1, "5.0": 1, "15.0": 1, "30.0": 1, "60.0": 2, "120.0": 3, "300.0": 3, "600.0": 3,
                       "1800.0": 3, "3600.0": 3, "7200.0": 3, "21600.0": 3, "43200.0": 3, "86400.0": 3, "+Inf": 3}
    buckets, count, total = found.histogram("switchyard_execution_duration_seconds", workflow="metrics_waiting")
    assert (count, buckets["1.0"]) == (1, 1) and 0 <= total < 0.01, "the cancelled one; the started one has not ended"

    buckets, count, total = found.histogram("switchyard_operation_duration_seconds", operation="metrics_work")
    assert count == 3 and total == pytest.approx(42.3, abs=0.01)
    assert {le: buckets[le] for le in ("0.25", "0.5", "1.0", "2.5", "30.0", "60.0", "+Inf")} == {
        "0.25": 0, "0.5": 1, "1.0": 1, "2.5": 2, "30.0": 2, "60.0": 3, "+Inf": 3}

    (agent,) = found.labelled("switchyard_operation_queue_seconds_count", "agent")
    buckets, count, total = found.histogram("switchyard_operation_queue_seconds", agent=agent)
    assert count == 3 and buckets["0.01"] == 3 and total < 0.01, "the harness starts what it sends at once"
    assert found.value("switchyard_agents_online") == 0
    assert found.value("switchyard_reports_waiting") == 0


def test_the_time_in_a_queue_is_from_the_send_to_the_start_of_the_same_attempt(make_operation, token_settings):
    sent = timezone.now() - timedelta(hours=1)
    make_operation(OperationState.SUCCEEDED, agent="a1", sent_at=sent, started_at=sent + timedelta(seconds=0.3),
                   succeeded_at=sent + timedelta(seconds=5.7))
    make_operation(OperationState.STARTED, agent="a1", sent_at=sent, started_at=sent + timedelta(seconds=20))
    make_operation(OperationState.FAILED, agent="a2", sent_at=sent, started_at=sent + timedelta(seconds=700),
                   failed_at=sent + timedelta(seconds=701.5))
    # Not counted: waiting in the queue now; and started before its last send (an earlier attempt's start).
    make_operation(OperationState.SENT, agent="a2", sent_at=sent)
    make_operation(OperationState.SENT, agent="a2", sent_at=sent, started_at=sent - timedelta(seconds=9))

    found = scrape(token_client())

    buckets, count, total = found.histogram("switchyard_operation_queue_seconds", agent="a1")
    assert (count, total) == (2, pytest.approx(20.3, abs=0.002))
    assert (buckets["0.25"], buckets["0.5"], buckets["10.0"], buckets["30.0"]) == (0, 1, 1, 2)
    buckets, count, total = found.histogram("switchyard_operation_queue_seconds", agent="a2")
    assert (count, total, buckets["300.0"], buckets["900.0"]) == (1, pytest.approx(700, abs=0.002), 0, 1)
    # The durations: started to succeeded (5.4 s) and to failed (1.5 s); the started one has not ended.
    buckets, count, total = found.histogram("switchyard_operation_duration_seconds", operation="noop")
    assert (count, total, buckets["1.0"], buckets["2.5"], buckets["5.0"], buckets["10.0"]) == (
        2, pytest.approx(6.9, abs=0.002), 0, 1, 1, 2)
    assert found.value("switchyard_operations", state="sent") == 2


def test_each_unpaused_schedule_says_how_late_its_next_slot_is(db, token_settings, viewer, guarded):
    now = timezone.now()
    due = Schedule.objects.create(workflow_id="metrics_job", interval=60, next_run_at=now - timedelta(seconds=30))
    later = Schedule.objects.create(workflow_id="metrics_job", interval=60, next_run_at=now + timedelta(seconds=45))
    Schedule.objects.create(workflow_id="metrics_job", interval=60, paused=True, next_run_at=now - timedelta(hours=1))
    hidden = Schedule.objects.create(workflow_id=GUARDED, interval=60, next_run_at=now - timedelta(seconds=5))

    with clock.using(lambda: now):
        found = scrape(token_client())
        seen_by_viewer = scrape(user_client(viewer))

    lateness = "switchyard_schedule_lateness_seconds"
    assert found.value(lateness, schedule=due.pk, workflow="metrics_job") == 30
    assert found.value(lateness, schedule=later.pk, workflow="metrics_job") == 0
    assert found.value(lateness, schedule=hidden.pk, workflow=GUARDED) == 5
    assert found.labelled(lateness, "schedule") == {str(due.pk), str(later.pk), str(hidden.pk)}, "not the paused one"
    assert seen_by_viewer.labelled(lateness, "schedule") == {str(due.pk), str(later.pk)}


def test_the_executions_queued_are_counted_per_concurrency_key(make_execution, token_settings):
    for status, key in [(ExecutionStatus.QUEUED, "db-1"), (ExecutionStatus.QUEUED, "db-1"), (ExecutionStatus.QUEUED, "db-2"),
                        (ExecutionStatus.STARTED, "db-1"), (ExecutionStatus.QUEUED, "")]:
        make_execution(status, concurrency_key=key, workflow_id="metrics_job")

    found = scrape(token_client())

    assert found.labelled("switchyard_concurrency_queued", "key") == {"db-1", "db-2"}, "not the executions of no key"
    assert found.value("switchyard_concurrency_queued", key="db-1") == 2
    assert found.value("switchyard_concurrency_queued", key="db-2") == 1
    assert found.value("switchyard_executions", workflow="metrics_job", status="queued") == 4


def test_the_agents_online_are_those_heard_from_lately(db, token_settings):
    now = timezone.now()
    Agent.objects.create(name="fresh", last_heartbeat=now)
    Agent.objects.create(name="gone", last_heartbeat=now - timedelta(minutes=5))
    Agent.objects.create(name="never")

    assert scrape(token_client()).value("switchyard_agents_online") == 1


def test_a_workflow_that_has_executions_but_is_no_longer_registered_is_counted_too(make_execution, token_settings):
    make_execution(ExecutionStatus.FAILED, workflow_id="retired")

    found = scrape(token_client())

    assert found.value("switchyard_executions", workflow="retired", status="failed") == 1
    assert found.value("switchyard_executions", workflow="retired", status="started") == 0
    assert found.value("switchyard_executions", workflow="metrics_waiting", status="started") == 0, "registered, none ran"


def test_a_label_value_of_any_text_is_escaped(make_execution, make_operation, token_settings):
    name = 'quote " backslash \\ newline \n and ünïcode'
    make_operation(OperationState.PENDING, make_execution(ExecutionStatus.PENDING, workflow_id=name), agent=name)

    assert scrape(token_client()).value("switchyard_executions", workflow=name, status="pending") == 1


def test_a_scrape_runs_six_queries_however_many_rows(make_execution, make_operation, token_settings):
    def queries():
        with CaptureQueriesContext(connection) as captured:
            scrape(token_client())
        return len(captured)

    few = queries()
    now = timezone.now()
    for i in range(30):
        execution = make_execution(ExecutionStatus.COMPLETED, workflow_id=f"wf-{i % 7}", started_at=now, ended_at=now)
        make_operation(OperationState.SUCCEEDED, execution, operation=f"op-{i % 5}", agent=f"agent-{i % 3}",
                       sent_at=now, started_at=now, succeeded_at=now)
    # The executions, the operations, the schedules, the queued executions, the steps limits hold
    # back, and the agents'.
    assert few == queries() == 6


# --- who may scrape, and what each sees --------------------------------------------------------

def test_the_scrape_token_is_accepted_and_nothing_else_is(db, token_settings):
    assert scrape(token_client()).value("switchyard_agents_online") == 0
    assert scrape(APIClient(), HTTP_AUTHORIZATION=f"bearer {TOKEN}").families, "the scheme in any case"
    for wrong in [TOKEN[:-1], TOKEN + "x", TOKEN.upper(), "", "x" * 3_000_000, f"{TOKEN}\x00", "tökén-" + TOKEN,
                  TOKEN[:-1] + "\ud800"]:
        assert_error(CheckedClient().get(METRICS, HTTP_AUTHORIZATION=f"Bearer {wrong}"), 401, "authentication_failed")
    assert_error(CheckedClient().get(METRICS), 401, "not_authenticated")
    response = CheckedClient().get(METRICS, HTTP_AUTHORIZATION="Bearer nope")
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_no_token_is_accepted_when_none_is_set(db):
    body = assert_error(CheckedClient().get(METRICS, HTTP_AUTHORIZATION=f"Bearer {TOKEN}"), 401, "authentication_failed")
    assert "METRICS_TOKEN" in body["message"]


def test_a_user_scrapes_with_view_execution_and_no_one_without(db, viewer):
    assert scrape(user_client(viewer)).families
    nobody = Token.objects.create(user=make_user("nobody")).key
    body = assert_error(CheckedClient().get(METRICS, HTTP_AUTHORIZATION=f"Token {nobody}"), 403, "permission_denied")
    assert "view_execution" in body["message"]
    token = Token.objects.create(user=viewer)
    assert scrape(APIClient(), HTTP_AUTHORIZATION=f"Token {token.key}").families, "the API's own tokens work too"


def test_a_user_sees_nothing_of_the_workflows_hidden_from_it(make_execution, make_operation, viewer, guarded,
                                                            token_settings, django_user_model):
    now = timezone.now()
    for workflow in (GUARDED, "metrics_job"):
        execution = make_execution(ExecutionStatus.COMPLETED, workflow_id=workflow, started_at=now - timedelta(seconds=3),
                                   ended_at=now)
        make_operation(OperationState.SUCCEEDED, execution, operation=f"op-of-{workflow}", agent=f"agent-of-{workflow}",
                       sent_at=now - timedelta(seconds=2), started_at=now - timedelta(seconds=1), succeeded_at=now)
    superuser = django_user_model.objects.create_superuser("root", "root@localhost", "x")

    seen = {who: scrape(client) for who, client in [("viewer", user_client(viewer)), ("token", token_client()),
                                                     ("superuser", user_client(superuser))]}

    for who, found in seen.items():
        shown = who != "viewer"
        assert (GUARDED in found.labelled("switchyard_executions", "workflow")) is shown, who
        assert (GUARDED in found.labelled("switchyard_execution_duration_seconds_count", "workflow")) is shown, who
        assert (f"op-of-{GUARDED}" in found.labelled("switchyard_operation_duration_seconds_count", "operation")) is shown
        assert (f"agent-of-{GUARDED}" in found.labelled("switchyard_operation_queue_seconds_count", "agent")) is shown
        assert found.value("switchyard_operations", state="succeeded") == (2 if shown else 1), who
        assert found.value("switchyard_executions", workflow="metrics_job", status="completed") == 1, who
    assert GUARDED not in seen["viewer"].text


def test_prometheus_gets_text_and_an_error_is_json_whatever_was_asked(db, token_settings):
    assert scrape(token_client(), HTTP_ACCEPT=PROMETHEUS_ACCEPT).families
    assert scrape(token_client(), HTTP_ACCEPT="text/plain").families
    assert scrape(token_client(), HTTP_ACCEPT="*/*").families
    wrong = CheckedClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer wrong-token-of-some-length")
    response = wrong.get(METRICS, HTTP_ACCEPT=PROMETHEUS_ACCEPT)
    assert_error(response, 401, "authentication_failed")
    assert response["Content-Type"] == "application/json"
    checked = CheckedClient()
    checked.credentials(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert_error(checked.get(METRICS, HTTP_ACCEPT="application/json"), 406, "not_acceptable")
    assert_error(checked.get(METRICS, {"format": "json"}), 406, "not_acceptable")
    assert token_client().get(METRICS, {"format": "prometheus"}).status_code == 200
    assert token_client().head(METRICS).status_code == 200
    described = token_client().options(METRICS)
    assert (described.status_code, described["Content-Type"], described.json()["name"]) == (
        200, "application/json", "Metrics")
    assert_error(checked.post(METRICS, {}, format="json"), 405, "method_not_allowed")


@pytest.mark.parametrize("value", ["short-token", "", 12345678901234567890, "a token with spaces in it", "tökén" * 8,
                                   "ok-length-but\x00-nul", True])
def test_a_scrape_token_that_cannot_work_is_a_system_check_error(db, value):
    with override_settings(WORKFLOWS={"METRICS_TOKEN": value}):
        errors = checks.run_checks()
    assert [e.id for e in errors] == ["workflows.E002"] and "METRICS_TOKEN" in errors[0].msg
    assert str(value) not in errors[0].msg or value == "", "the message never repeats a secret"


def test_the_schema_documents_the_endpoint_as_text_with_json_errors():
    responses = openapi()["paths"]["/api/v1/metrics"]["get"]["responses"]
    assert responses["200"]["content"] == {"text/plain": {"schema": {"type": "string"}}}
    for code in ("401", "403", "406", "429"):
        assert responses[code]["content"] == {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}


# --- the series of other apps ------------------------------------------------------------------

def test_another_app_adds_its_series_through_the_hook(db, token_settings, monkeypatch):
    monkeypatch.setitem(metrics._sources, "probe", lambda: [GaugeMetricFamily("probe_value", "a probe", value=7)])
    assert scrape(token_client()).value("probe_value") == 7


# --- the dashboard and the documentation -------------------------------------------------------

#: A name in a PromQL expression that is not a metric: functions, keywords, label names.
PROMQL_WORDS = {"sum", "by", "rate", "increase", "histogram_quantile", "max", "min", "avg", "count", "without", "le",
                "workflow", "status", "state", "operation", "agent", "schedule", "key", "clamp_min", "topk", "or",
                "on", "ignoring", "group_left", "offset", "bool", "and", "unless", "absent", "time", "vector",
                "sort_desc", "label_replace", "label_values", "deriv", "delta", "changes", "resets", "max_over_time",
                "avg_over_time"}


def dashboard_expressions(node):
    """Every ``expr`` of the dashboard's panels (rows' included) and of its variables' queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                yield value["query"]
            else:
                yield from dashboard_expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_expressions(item)


def test_every_series_the_grafana_dashboard_queries_is_one_the_endpoint_exposes(switchyard):
    metrics_workflows.CLOCK = switchyard.clock
    switchyard.run("metrics_job", {"seconds": 1})  # so that every histogram has samples
    Schedule.objects.create(workflow_id="metrics_job", interval=60, next_run_at=timezone.now())
    with override_settings(WORKFLOWS={"METRICS_TOKEN": TOKEN}):
        found = scrape(token_client())
    exposed = set(found.families) | {name for name, _ in found.samples}

    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    expressions = list(dashboard_expressions(dashboard))
    used = {name for expr in expressions for name in re.findall(r"\b(switchyard_[a-z_]+)\b", expr)}
    assert len(expressions) >= 8 and used, "the dashboard queries the endpoint's series"
    assert used - exposed == set()
    assert {name for name in FAMILIES if not any(u == name or u.startswith(name + "_") for u in used)} == set(), \
        "every series has a panel"
    # Every word of an expression outside strings and braces is a metric, a PromQL word or a number.
    for expr in expressions:
        bare = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]|\$\w+|\$\{[^}]*\}', " ", expr)
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bare)) - used - PROMQL_WORDS
        assert words == set(), (expr, words)
    assert all(panel.get("datasource", {}).get("uid") == "${datasource}" for panel in dashboard["panels"]
               if panel.get("type") != "row")


def test_the_metrics_page_documents_every_series_and_its_labels():
    page = (ROOT / "docs" / "metrics.md").read_text()
    for name in FAMILIES:
        assert f"`{name}" in page, name
    for label in ("workflow", "status", "state", "operation", "agent", "schedule", "key", "le"):
        assert f"`{label}`" in page, label
    assert "METRICS_TOKEN" in page and "grafana-dashboard.json" in page
