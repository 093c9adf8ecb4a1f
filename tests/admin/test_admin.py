"""The operators' console in Django admin, through Django's test client: the list, an
execution's page (constant queries at 10,000 operations), the graph it draws, the five actions
with their permissions, confirmations and refusals, the start form, what stays read-only, the
agents. The tests are not transactional: the Celery messages of ``transaction.on_commit`` are
not sent (``outbox`` records the broadcasts a kill makes at once)."""

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent
from workflows_app.admin.executions import GRAPH_DRAW_LIMIT
from workflows_app.models import Event, Execution, Operation, OperationDependency
from workflows_app.states import ExecutionStatus, OperationState
from workflows_app.transitions import execution_transition

pytestmark = pytest.mark.django_db

LIST = reverse("admin:workflows_app_execution_changelist")
START = reverse("admin:workflows_app_execution_add")


def page_url(execution):
    return reverse("admin:workflows_app_execution_change", args=[execution.pk])


def act_url(execution):
    return reverse("admin:workflows_app_execution_act", args=[execution.pk])


def graph_url(execution):
    return reverse("admin:workflows_app_execution_graph", args=[execution.pk])


def messages_of(response):
    return [str(message) for message in response.context["messages"]] if response.context else []


@pytest.fixture
def operator(client):
    """A staff user who may see, start, cancel and resume executions, not force them (the
    operations, events and agents are read with view_execution)."""
    user = get_user_model().objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workflows_app", codename__in=["view_execution", "add_execution", "change_execution"]))
    client.force_login(user)
    return client


@pytest.fixture
def forcer(operator):
    """The operator, also holding workflows_app.force_execution."""
    user = get_user_model().objects.get(username="operator")
    user.user_permissions.add(Permission.objects.get(codename="force_execution"))
    return operator


def make_chain(make_execution, n, status=ExecutionStatus.STARTED, states=None):
    """An execution of ``n`` operations, each depending on the one before, in bulk."""
    execution = make_execution(status=status, started_at=timezone.now())
    states = states or [OperationState.PENDING] * n
    operations = Operation.objects.bulk_create(
        Operation(execution=execution, name=f"step-{i}", operation="noop", agent="local", state=states[i],
                  attempt=1 if states[i] != OperationState.PENDING else 0)
        for i in range(n))
    OperationDependency.objects.bulk_create(
        OperationDependency(operation=operations[i], depends_on=operations[i - 1]) for i in range(1, n))
    return execution


def queries_of(client, url):
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.content[:2000]
    return len(captured), response


# --- the list ---------------------------------------------------------------------------------


def test_the_list_runs_the_same_queries_for_3_and_300_rows(admin_client, make_execution, make_operation):
    def fill(n):
        for _ in range(n - Execution.objects.count()):
            execution = make_execution()
            make_operation(OperationState.SUCCEEDED, execution)
            make_operation(OperationState.STARTED, execution)

    fill(3)
    few, response = queries_of(admin_client, LIST + "?all=")
    assert response.content.count(b'class="sy-count sy-succeeded"') == 3
    fill(300)
    many, response = queries_of(admin_client, LIST + "?all=")
    assert response.content.count(b'class="sy-count sy-started"') == 300
    assert few == many, f"{few} queries for 3 rows, {many} for 300"


def test_the_list_shows_coloured_status_duration_counts_newest_first(admin_client, make_execution, make_operation):
    old = make_execution(status=ExecutionStatus.FAILED, deployment_id="dep-old")
    new = make_execution(status=ExecutionStatus.COMPLETED, started_at=timezone.now() - timedelta(seconds=75),
                         ended_at=timezone.now())
    for state in [OperationState.SUCCEEDED, OperationState.SUCCEEDED, OperationState.FAILED]:
        make_operation(state, new)
    body = admin_client.get(LIST).content.decode()
    assert body.index(str(new.pk)[:8]) < body.index(str(old.pk)[:8]), "newest first"
    assert '<span class="sy-badge sy-completed">completed</span>' in body
    assert '<span class="sy-badge sy-failed">failed</span>' in body
    assert "1m 15s" in body
    assert re.search(r'sy-count sy-succeeded"[^>]*>2 succeeded', body)
    assert "dep-old" in body


def test_a_completed_executions_failed_steps_are_shown_handled_a_failed_ones_red(admin_client, make_execution,
                                                                                 make_operation):
    completed = make_execution(status=ExecutionStatus.COMPLETED)
    failed = make_execution(status=ExecutionStatus.FAILED)
    for execution in (completed, failed):
        make_operation(OperationState.FAILED, execution)
    body = admin_client.get(LIST).content.decode()
    assert body.count('<span class="sy-count sy-failed sy-handled" title="failed, and handled by the workflow">'
                      '1 failed (handled)</span>') == 1
    assert body.count('<span class="sy-count sy-failed" title="failed">1 failed</span>') == 1


def test_the_lists_write_dates_to_the_second(admin_client, make_execution, make_operation):
    """As the execution's page does: ``2026-11-26 21:00:49``, not Django's ``Nov. 26, 2026, 9 p.m.``."""
    at = timezone.make_aware(timezone.datetime(2026, 11, 26, 21, 0, 49))
    execution = make_execution(started_at=at)
    Execution.objects.filter(pk=execution.pk).update(created_at=at)
    operation = make_operation(OperationState.STARTED, execution, started_at=at, attempt=1)
    event = Event.objects.create(execution=execution, type="log", message="m")
    Event.objects.filter(pk=event.pk).update(timestamp=at)
    Agent.objects.create(name="host-1", hostname="box", started_at=at, last_heartbeat=at)
    for url in [LIST, reverse("admin:workflows_app_event_changelist"), reverse("admin:workflows_app_operation_changelist"),
                reverse("admin:agents_agent_changelist"),
                reverse("admin:workflows_app_operation_change", args=[operation.pk]),
                reverse("admin:workflows_app_event_change", args=[event.pk])]:
        body = admin_client.get(url).content.decode()
        assert "2026-11-26 21:00:49" in body, url
        assert not re.search(r"(a|p)\.m\.", body), url


def test_durations_under_a_second_are_not_0s(admin_client, make_execution, make_operation):
    start = timezone.now() - timedelta(seconds=5)
    execution = make_execution(status=ExecutionStatus.COMPLETED, started_at=start,
                               ended_at=start + timedelta(seconds=0.42))
    make_operation(OperationState.SUCCEEDED, execution, attempt=1, started_at=start,
                   succeeded_at=start + timedelta(seconds=0.07))
    assert "<td>0.07s</td>" in admin_client.get(page_url(execution)).content.decode()
    assert '<td class="field-duration">0.42s</td>' in admin_client.get(LIST).content.decode()


def test_the_list_filters_and_searches(admin_client, make_execution):
    demo = make_execution(workflow_id="demo", status=ExecutionStatus.STARTED, deployment_id="shop-eu")
    other = make_execution(workflow_id="example", status=ExecutionStatus.FAILED, deployment_id="shop-us")

    def shown(query):
        body = admin_client.get(LIST + query).content.decode()
        return {pk for pk in (demo.pk, other.pk) if str(pk)[:8] in body}

    assert shown("?status__exact=failed") == {other.pk}
    assert shown("?workflow_id=demo") == {demo.pk}
    assert shown("?q=shop-eu") == {demo.pk}
    assert shown(f"?q={str(other.pk)[:8]}") == {other.pk}
    assert shown(f"?q={other.pk}") == {other.pk}
    assert shown("?q=not-a-uuid-at-all") == set()
    assert shown("?created_at__gte=2000-01-01+00:00:00%2B00:00") == {demo.pk, other.pk}


# --- the page of an execution ---------------------------------------------------------------------


def test_the_page_shows_summary_operations_events_payload_and_error(admin_client, make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.FAILED, payload={"vm": {"ip": "10.0.0.7"}},
                               error="step 'b' failed: boom\nTraceback (most recent call last):\n  File \"x\"",
                               token_hash="0a1b2c3d" * 8, parameters={"n": 2})
    make_operation(OperationState.FAILED, execution, name="b", attempt=2,
                   error={"type": "ValueError", "message": "boom", "traceback": "Traceback ..."})
    Event.objects.create(execution=execution, type="log", message="hello from the log")
    body = admin_client.get(page_url(execution)).content.decode()
    assert '<span class="sy-badge sy-failed">failed</span>' in body
    assert "0a1b2c3d" not in body and "token_hash" not in body, "the token is never shown"
    assert '<pre class="sy-pre sy-error">step &#x27;b&#x27; failed: boom\nTraceback' in body
    assert '&quot;ip&quot;: &quot;10.0.0.7&quot;' in body and '\n    &quot;ip&quot;' in body, "pretty JSON"
    assert "ValueError: boom" in body
    assert "hello from the log" in body
    assert f"?execution__id__exact={execution.pk}" in body
    events = admin_client.get(reverse("admin:workflows_app_event_changelist") + f"?execution__id__exact={execution.pk}")
    assert events.status_code == 200 and "hello from the log" in events.content.decode()


def test_the_page_warns_of_steps_waiting_for_an_agent_never_seen(admin_client, make_execution, make_operation):
    execution = make_execution()
    make_operation(OperationState.SENT, execution, name="x", agent="nowhere", attempt=1)
    make_operation(OperationState.SENT, execution, name="y", agent="here", attempt=1)
    Agent.objects.create(name="here", hostname="box", last_heartbeat=timezone.now())
    body = admin_client.get(page_url(execution)).content.decode()
    box = re.search(r'<div id="sy-warnings" data-sy-live>(.*?)</div>', body, re.S).group(1)
    assert 'class="sy-warnings"' in box
    assert re.findall(r"<li[^>]*>(.*?)</li>", box) == [
        "step &#x27;x&#x27; waits for agent &#x27;nowhere&#x27;, which has never been seen"]
    Operation.objects.filter(name="x").update(state=OperationState.SUCCEEDED)
    body = admin_client.get(page_url(execution)).content.decode()
    assert '<div id="sy-warnings" data-sy-live></div>' in body, "no box once nothing waits"


def test_the_page_marks_what_follows_the_execution_for_its_live_script(admin_client, running):
    """live.js replaces each part marked data-sy-live by the same part of the page fetched again;
    the picture is not one of them (its own script keeps it)."""
    body = admin_client.get(page_url(running) + "?state=pending").content.decode()
    live = re.findall(r'id="([a-z-]+)" data-sy-live', body)
    assert live == ["sy-summary", "sy-actions", "sy-warnings", "sy-error-block", "sy-children-block",
                    "sy-operations-block", "sy-events-block", "sy-payload"]
    assert "workflows_app/live.js" in body and f'data-execution="{running.pk}"' in body
    assert 'data-status="started" data-active="true"' in body
    assert "As the page was loaded" not in body
    Operation.objects.filter(execution=running, state=OperationState.PENDING).update(state=OperationState.STARTED)
    body = admin_client.get(page_url(running) + "?state=pending").content.decode()
    assert 'class="selected">pending 0</a>' in body, "the filter shown stays, at 0"


def test_a_cancelled_steps_error_reads_as_one_sentence(admin_client, make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.CANCELLED)
    make_operation(OperationState.CANCELLED, execution, error={
        "type": "Cancelled", "message": "cancelled: the execution is cancelling", "traceback": ""})
    make_operation(OperationState.FAILED, execution, error={"type": "ValueError", "message": "boom"})
    body = admin_client.get(page_url(execution)).content.decode()
    cells = re.findall(r'<td class="sy-error-cell">(.*?)</td>', body)
    assert cells == ["Cancelled: the execution is cancelling", "ValueError: boom"]


def test_the_page_of_10000_operations_runs_as_many_queries_as_one_of_10_and_pages_them(admin_client, make_execution):
    small = make_chain(make_execution, 10)
    big = make_chain(make_execution, 10_000, states=[OperationState.SUCCEEDED] * 9_000 + [OperationState.PENDING] * 1_000)
    small_queries, _ = queries_of(admin_client, page_url(small))
    big_queries, response = queries_of(admin_client, page_url(big))
    # The big one adds only its summary per operation and state (it is too big to draw).
    assert big_queries == small_queries + 1, (small_queries, big_queries)
    body = response.content.decode()
    assert body.count('<td><a href="/admin/workflows_app/operation/') == 50
    assert "page 1 of 200" in body
    assert 'id="sy-graph-summary"' in body and 'id="sy-graph"' not in body
    assert re.search(r"<td>noop</td><td>10000</td>", body)
    filtered = admin_client.get(page_url(big) + "?state=pending&page=20").content.decode()
    assert "page 20 of 20" in filtered and "step-9999" in filtered and "step-0<" not in filtered
    queries, _ = queries_of(admin_client, page_url(big) + "?state=pending&page=3")
    assert queries == big_queries


def test_the_graph_json_has_every_box_and_arrow_and_a_big_graph_is_not_drawn(admin_client, make_execution):
    execution = make_chain(make_execution, 3, states=[OperationState.SUCCEEDED, OperationState.STARTED,
                                                      OperationState.PENDING])
    page = admin_client.get(page_url(execution)).content.decode()
    assert 'id="sy-graph"' in page and "elk-0.12.0.bundled.js" in page and "graph.js" in page
    assert "//" not in re.sub(r"https?://(127\.0\.0\.1|localhost|testserver)", "", " ".join(
        re.findall(r'(?:src|href)="([^"]+)"', page))).replace("://", ""), "nothing loaded from another server"
    data = admin_client.get(graph_url(execution)).json()
    assert data["status"] == "started" and data["active"] is True and data["too_large"] is False
    assert [(n["name"], n["state"]) for n in data["nodes"]] == [
        ("step-0", "succeeded"), ("step-1", "started"), ("step-2", "pending")]
    assert data["edges"] == [["step-0", "step-1"], ["step-1", "step-2"]]

    big = make_chain(make_execution, GRAPH_DRAW_LIMIT + 1)
    data = admin_client.get(graph_url(big)).json()
    assert data["too_large"] is True and data["nodes"] == []
    assert admin_client.get(reverse("admin:workflows_app_execution_graph", args=[uuid.uuid4()])).status_code == 404
    assert admin_client.get(reverse("admin:workflows_app_execution_graph", args=["nope"])).status_code == 404


def test_an_unknown_or_malformed_id_is_a_message_not_an_error(admin_client):
    for object_id in [uuid.uuid4(), "not-a-uuid"]:
        response = admin_client.get(reverse("admin:workflows_app_execution_change", args=[object_id]), follow=True)
        assert response.status_code == 200
        assert any("no execution" in message for message in messages_of(response))


@override_settings(WORKFLOWS={"FLOWER_URL": "http://flower.example:5555"})
def test_operations_link_to_their_flower_task_pages_when_flower_url_is_set(admin_client, make_execution, make_operation):
    execution = make_execution()
    operation = make_operation(OperationState.STARTED, execution, attempt=2)
    body = admin_client.get(page_url(execution)).content.decode()
    assert f'href="http://flower.example:5555/task/{operation.task_id}"' in body
    with override_settings(WORKFLOWS={}):
        assert "flower.example" not in admin_client.get(page_url(execution)).content.decode()


@override_settings(WORKFLOWS={"FLOWER_URL": "http://flower.example:5555"})
def test_a_local_step_is_marked_local_in_the_lists_the_page_and_the_graph(admin_client, make_execution, make_operation):
    """A local step runs inside the manager's pass (its agent: the managers' queue), with no
    message: every view says so, and none links it to a Celery task in Flower."""
    execution = make_execution()
    local = make_operation(OperationState.SUCCEEDED, execution, name="tally", operation="local_add", attempt=1,
                           local=True)
    remote = make_operation(OperationState.STARTED, execution, name="ship", operation="remote_double", attempt=1,
                            agent="warehouse")

    body = admin_client.get(page_url(execution)).content.decode()
    rows = dict(re.findall(r'<tr data-step="([^"]+)">(.*?)</tr>', body, re.S))
    assert '<span class="sy-local"' in rows["tally"] and "sy-local" not in rows["ship"]
    assert local.task_id not in body and f"/task/{remote.task_id}" in body, "a local step has no Celery task"

    nodes = {n["name"]: n for n in admin_client.get(graph_url(execution)).json()["nodes"]}
    assert {name: (n["agent"], n["local"]) for name, n in nodes.items()} == {
        "tally": ("management", True), "ship": ("warehouse", False)}

    changelist = reverse("admin:workflows_app_operation_changelist")
    listed = admin_client.get(changelist).content.decode()
    assert 'class="sortable column-local"' in listed and "?local__exact=1" in listed, "a column and a filter"
    only_local = admin_client.get(changelist + "?local__exact=1").content.decode()
    assert ">tally<" in only_local and ">ship<" not in only_local
    assert ">ship<" in admin_client.get(changelist + "?local__exact=0").content.decode()
    page = admin_client.get(reverse("admin:workflows_app_operation_change", args=[local.pk])).content.decode()
    assert re.search(r'field-local.*?icon-yes\.svg', page, re.S) and "flower.example" not in page


# --- the actions ----------------------------------------------------------------------------------


def test_the_page_offers_what_the_status_allows_and_the_user_may(operator, forcer, make_execution):
    started = make_execution(status=ExecutionStatus.STARTED)
    failed = make_execution(status=ExecutionStatus.FAILED)

    def buttons(client, execution):
        return re.findall(r'data-action="([a-z-]+)"', client.get(page_url(execution)).content.decode())

    assert buttons(forcer, started) == ["cancel", "force-cancel", "kill", "resume", "pause"]
    assert buttons(forcer, failed) == ["resume", "force-resume"]
    user = get_user_model().objects.get(username="operator")
    user.user_permissions.remove(Permission.objects.get(codename="force_execution"))
    assert buttons(operator, started) == ["cancel", "resume", "pause"]


def test_cancel_calls_the_service_and_says_what_happened(operator, running):
    response = operator.post(act_url(running), {"action": "cancel"}, follow=True)
    running.refresh_from_db()
    assert running.status == ExecutionStatus.CANCELLING
    assert messages_of(response) == [f"cancel: execution {running.pk} is now cancelling"]
    # live.js rewrites the end of a message tagged with the status it names, once that has moved on.
    assert [m.extra_tags for m in response.context["messages"]] == ["sy-said sy-said-cancelling"]
    assert '<li class="sy-said sy-said-cancelling success">Cancel: execution' in response.content.decode()
    assert Event.objects.filter(execution=running, type="workflow_cancelling").exists()


def test_a_refused_action_is_a_message_and_changes_nothing(operator, make_execution):
    done = make_execution(status=ExecutionStatus.COMPLETED)
    response = operator.post(act_url(done), {"action": "resume"}, follow=True)
    assert response.status_code == 200
    assert any(m.startswith("resume refused:") for m in messages_of(response)), messages_of(response)
    done.refresh_from_db()
    assert done.status == ExecutionStatus.COMPLETED
    response = operator.post(act_url(done), {"action": "explode"}, follow=True)
    assert messages_of(response) == ["unknown action 'explode'"]
    assert operator.get(act_url(done)).status_code == 405


def test_an_action_that_lost_a_race_is_refused_with_a_message(operator, running):
    """The page offered cancel while the execution ran; it completed before the button was pressed."""
    assert 'data-action="cancel"' in operator.get(page_url(running)).content.decode()
    execution_transition(running, ExecutionStatus.COMPLETED, message="done meanwhile")
    response = operator.post(act_url(running), {"action": "cancel"}, follow=True)
    assert response.status_code == 200
    assert any(m.startswith("cancel refused:") and "completed" in m for m in messages_of(response))
    running.refresh_from_db()
    assert running.status == ExecutionStatus.COMPLETED


def test_force_actions_need_the_permission(operator, running):
    response = operator.post(act_url(running), {"action": "kill", "confirmed": "yes"}, follow=True)
    assert messages_of(response) == [f"kill refused: operator may not kill execution {running.pk}: it needs the "
                                     "permission workflows_app.force_execution"]
    running.refresh_from_db()
    assert running.status == ExecutionStatus.STARTED


def test_kill_asks_for_confirmation_then_kills(forcer, running, outbox):
    confirm = forcer.post(act_url(running), {"action": "kill"})
    assert confirm.status_code == 200 and b"Are you sure" in confirm.content and b'value="Yes, kill"' in confirm.content
    # Red as the button that led here (admin.css colours sy-confirm-kill as sy-action-kill).
    assert b'class="button sy-confirm sy-confirm-kill"' in confirm.content
    assert b"workflows_app/admin.css" in confirm.content
    running.refresh_from_db()
    assert running.status == ExecutionStatus.STARTED, "nothing happens before the confirmation"
    response = forcer.post(act_url(running), {"action": "kill", "confirmed": "yes"}, follow=True)
    running.refresh_from_db()
    assert running.status == ExecutionStatus.CANCELLED, "no process ran: the kill ends at once"
    assert messages_of(response) == [f"kill: execution {running.pk} is now cancelled"]
    assert outbox["kill"], "the agents were told to stop the processes"


def test_after_a_resume_the_page_counts_the_run_from_the_resume(operator, make_execution):
    """Started an hour ago, failed, resumed two minutes ago: the page says both, and its duration
    is the resumed run's."""
    execution = make_execution(status=ExecutionStatus.FAILED, started_at=timezone.now() - timedelta(hours=1))
    execution = execution_transition(execution, ExecutionStatus.STARTED)
    Event.objects.filter(execution_id=execution.pk, type="workflow_resumed").update(
        timestamp=timezone.now() - timedelta(minutes=2))
    page = operator.get(page_url(execution)).content.decode()
    started = re.search(r'id="sy-started">([^<]*)<', page).group(1)
    duration = re.search(r'id="sy-duration"[^>]*>([^<]*)<', page).group(1)
    assert started.startswith(timezone.localtime(execution.started_at).strftime("%Y-%m-%d %H:%M")) and ", resumed " in started
    assert duration.startswith("2m") and duration.endswith("since the resume"), duration


@pytest.fixture
def task_executions(make_execution):
    """Two executions of Django tasks (``add`` twice, ``fails`` once) and one of another workflow."""
    from tests import task_functions
    from workflows_app import task_runs

    for task in (task_functions.add, task_functions.fails):
        task_runs.remember(task)

    def of(task):
        return make_execution(workflow_id="django_task", parameters={"task": task, "args": [], "kwargs": {}})

    return {"add": [of("tests.task_functions.add"), of("tests.task_functions.add")],
            "fails": [of("tests.task_functions.fails")], "other": [make_execution()]}


def listed(client, query="") -> set:
    page = client.get(LIST + query).content.decode()
    return {match for match in re.findall(r"/execution/([0-9a-f-]{36})/change/", page)}


def ids(*executions):
    return {str(execution.pk) for execution in executions}


def test_a_django_tasks_execution_is_listed_by_its_task_and_found_by_its_name(operator, task_executions):
    page = operator.get(LIST).content.decode()
    assert page.count('django_task <span class="sy-task">tests.task_functions.add</span>') == 2
    assert listed(operator, "?task=tests.task_functions.add") == ids(*task_executions["add"])
    assert listed(operator, "?q=tests.task_functions.add") == ids(*task_executions["add"])
    assert listed(operator, "?q=fails") == ids(*task_executions["fails"]), "by its function's name too"
    assert listed(operator, "?q=no_such_task") == set()


def test_force_resume_from_the_page(forcer, make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.FAILED)
    make_operation(OperationState.STARTED, execution, attempt=1)
    forcer.post(act_url(execution), {"action": "force-resume", "confirmed": "yes"})
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.STARTED
    assert execution.operations.get().state == OperationState.SENDING, "sent again as a new attempt"
    assert execution.operations.get().attempt == 2


def test_list_actions_take_each_and_force_ones_confirm_first(forcer, make_execution, outbox):
    first, second = make_execution(), make_execution()
    done = make_execution(status=ExecutionStatus.COMPLETED)
    selected = {"_selected_action": [first.pk, second.pk, done.pk]}
    response = forcer.post(LIST, {"action": "cancel_selected", **selected}, follow=True)
    said = sorted(messages_of(response))
    assert said[0].startswith("cancel refused:") and said[1:] == sorted(
        f"cancel: execution {e.pk} is now cancelled" for e in (first, second))
    assert {e.status for e in Execution.objects.filter(pk__in=[first.pk, second.pk])} == {ExecutionStatus.CANCELLED}

    third = make_execution()
    confirm = forcer.post(LIST, {"action": "kill_selected", "_selected_action": [third.pk]})
    assert b"Are you sure" in confirm.content
    third.refresh_from_db()
    assert third.status == ExecutionStatus.STARTED
    forcer.post(LIST, {"action": "kill_selected", "_selected_action": [third.pk], "confirmed": "yes"})
    third.refresh_from_db()
    assert third.status == ExecutionStatus.CANCELLED


def test_list_force_actions_are_not_offered_without_the_permission(operator, make_execution):
    make_execution()
    body = operator.get(LIST).content.decode()
    assert 'value="cancel_selected"' in body and 'value="kill_selected"' not in body


# --- read-only --------------------------------------------------------------------------------------


def test_nothing_edits_a_status_parameters_or_the_log(admin_client, running, make_operation):
    admin_client.post(page_url(running), {"workflow_id": "other", "status": "completed", "parameters": '{"x": 1}'})
    running.refresh_from_db()
    assert (running.workflow_id, running.status, running.parameters) == ("example", ExecutionStatus.STARTED, {})
    operation = running.operations.first()
    event = Event.objects.create(execution=running, type="log", message="kept")
    for model, obj in [("operation", operation), ("event", event)]:
        assert admin_client.get(reverse(f"admin:workflows_app_{model}_add")).status_code == 403
        assert admin_client.get(reverse(f"admin:workflows_app_{model}_delete", args=[obj.pk])).status_code == 403
        page = admin_client.get(reverse(f"admin:workflows_app_{model}_change", args=[obj.pk])).content.decode()
        form = page.split('id="content-main"')[1].split("</form>")[0]
        assert not re.search(r'<textarea|<select|<input(?![^>]*type="hidden")', form), form
    assert not re.search(r'name="(state|status|result|message)"', admin_client.get(
        reverse("admin:workflows_app_operation_change", args=[operation.pk])).content.decode())


def test_an_active_execution_cannot_be_deleted_an_ended_one_can(admin_client, running, make_execution):
    assert admin_client.get(reverse("admin:workflows_app_execution_delete", args=[running.pk])).status_code == 403
    done = make_execution(status=ExecutionStatus.COMPLETED)
    response = admin_client.post(LIST, {"action": "delete_ended", "_selected_action": [running.pk, done.pk]})
    assert b"Are you sure" in response.content
    response = admin_client.post(LIST, {"action": "delete_ended", "_selected_action": [running.pk, done.pk],
                                        "post": "yes"}, follow=True)
    assert set(Execution.objects.values_list("pk", flat=True)) == {running.pk}
    assert any("active execution(s) left alone" in m for m in messages_of(response))


# --- starting an execution ---------------------------------------------------------------------------


def test_the_start_form_lists_the_workflows_and_starts_through_the_service(operator):
    form = operator.get(START).content.decode()
    assert "Start execution" in operator.get(LIST).content.decode()
    assert '<option value="demo">demo</option>' in form and "n = 3" in form
    response = operator.post(START, {"workflow": "demo", "parameters": '{"n": 2}', "deployment_id": "dep-1",
                                     "if_busy": "refuse", "failure_mode": "", "dry_run": "on"}, follow=True)
    execution = Execution.objects.get()
    assert (execution.workflow_id, execution.parameters, execution.deployment_id) == ("demo", {"n": 2}, "dep-1")
    assert execution.is_dry_run and execution.created_by == "operator" and execution.status == ExecutionStatus.PENDING
    assert response.redirect_chain[-1][0] == page_url(execution)
    assert Event.objects.filter(execution=execution, message="created: demo").exists()
    assert [(str(m), m.extra_tags) for m in response.context["messages"]] == [
        (f"started demo: execution {execution.pk} is pending", "sy-said sy-said-pending")]


def test_the_start_form_checks_as_the_api_does_and_starts_nothing_on_bad_input(operator):
    def refused(data, field):
        response = operator.post(START, {"workflow": "demo", "if_busy": "refuse", **data})
        assert response.status_code == 200
        return " ".join(response.context["form"].errors.get(field, []))

    assert "unknown parameter(s): colour" in refused({"parameters": '{"colour": "red"}'}, "parameters")
    assert "JSON object" in refused({"parameters": "[1, 2]"}, "parameters")
    assert refused({"parameters": "{not json"}, "parameters")
    assert refused({"workflow": "no-such-workflow"}, "workflow")
    assert refused({"failure_mode": "whenever"}, "failure_mode")
    assert not Execution.objects.exists()


def test_the_start_form_refuses_queues_or_forces_beside_a_busy_deployment(operator, make_execution):
    busy = make_execution(status=ExecutionStatus.STARTED, deployment_id="dep-9", workflow_id="demo")
    response = operator.post(START, {"workflow": "demo", "deployment_id": "dep-9", "if_busy": "refuse"})
    assert str(busy.pk) in " ".join(response.context["form"].errors["deployment_id"])
    operator.post(START, {"workflow": "demo", "deployment_id": "dep-9", "if_busy": "queue"})
    operator.post(START, {"workflow": "demo", "deployment_id": "dep-9", "if_busy": "force",
                          "failure_mode": "fail_fast"})
    new = Execution.objects.exclude(pk=busy.pk).order_by("created_at")
    assert [(e.status, e.failure_mode) for e in new] == [(ExecutionStatus.QUEUED, "no_new_calls"),
                                                          (ExecutionStatus.PENDING, "fail_fast")]


def test_starting_needs_the_add_permission(client):
    user = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_execution"))
    client.force_login(user)
    assert client.get(START).status_code == 403
    assert "Start execution" not in client.get(LIST).content.decode()


# --- agents ------------------------------------------------------------------------------------------


@override_settings(WORKFLOWS={"FLOWER_URL": "http://flower.example:5555/"})
def test_agents_show_status_heartbeat_age_running_and_a_flower_link(admin_client, make_operation):
    now = timezone.now()
    Agent.objects.create(name="host-1", hostname="box", last_heartbeat=now - timedelta(seconds=5))
    Agent.objects.create(name="host-2", hostname="box2", last_heartbeat=now - timedelta(hours=2))
    make_operation(OperationState.STARTED, agent="host-1")
    make_operation(OperationState.STARTED, agent="host-1")
    body = admin_client.get(reverse("admin:agents_agent_changelist")).content.decode()
    rows = {name: row for name, row in re.findall(r'<tr[^>]*>.*?>(host-\d)<.*?</tr>', body, re.S) and [
        (m.group(1), m.group(0)) for m in re.finditer(r'<tr[^>]*>(?:(?!</tr>).)*?>(host-\d)<(?:(?!</tr>).)*</tr>', body, re.S)]}
    assert 'sy-badge sy-online">online' in rows["host-1"] and 'sy-badge sy-offline">offline' in rows["host-2"]
    # Its age as the page was made: 5 s and the time the test took since (seconds on a busy machine).
    age, took = re.search(r">(\d+)s ago<", rows["host-1"]), (timezone.now() - now).total_seconds()
    assert age and 5 <= int(age.group(1)) <= 5 + took and "2h 00m" in rows["host-2"]
    assert '<td class="field-running_operations">2</td>' in rows["host-1"]
    assert 'href="http://flower.example:5555/worker/host-1%40box"' in rows["host-1"]
    assert admin_client.get(reverse("admin:agents_agent_add")).status_code == 403


def test_a_parent_and_its_children_link_to_each_other(admin_client, make_execution, make_operation, monkeypatch):
    from workflows_app.admin import executions as admin_executions
    from workflows_app.states import StepKind

    monkeypatch.setattr(admin_executions, "CHILDREN_SHOWN", 2)
    parent = make_execution()
    kids = [make_execution(parent=parent, parent_step=f"child{i}", workflow_id="it_child") for i in range(3)]
    make_operation(OperationState.STARTED, parent, name="child0", kind=StepKind.WORKFLOW, operation="it_child", agent="")
    make_execution()  # not one of them

    page = admin_client.get(page_url(parent)).content.decode()
    table = page[page.index('id="sy-children"'):]
    shown = re.findall(r'<tr data-step="(child\d)">', table[:table.index("</table>")])
    assert shown == ["child0", "child1"]  # the first CHILDREN_SHOWN, oldest first
    assert f'href="{page_url(kids[0])}"' in page
    more = f"{LIST}?parent__id__exact={parent.pk}"
    assert more in page
    listed = admin_client.get(more)
    assert listed.status_code == 200 and {row.pk for row in listed.context["cl"].result_list} == {kid.pk for kid in kids}

    child_page = admin_client.get(page_url(kids[0])).content.decode()
    assert f'href="{page_url(parent)}"' in child_page and "<code>child0</code>" in child_page
    # The picture's node of a child leads to it: the graph names the child, the page the URL to fill in.
    node = admin_client.get(graph_url(parent)).json()["nodes"][0]
    assert (node["kind"], node["child"]) == ("workflow", str(kids[0].pk))
    assert 'data-change-url="/admin/workflows_app/execution/00000000-0000-0000-0000-000000000000/change/"' in page
