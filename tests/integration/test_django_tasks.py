"""Django's Tasks framework on real managers and agents, through the Switchyard backend
(``TASKS`` of the demo project): a task enqueued in a view runs on the agent its queue names,
and one enqueued in a view whose transaction rolls back never runs; ``get_result`` answers the
same from a second process; a task that raises ``RecoverableError`` twice succeeds on its third
attempt; a deferred task starts at its ``run_after`` to the second though its manager restarted
in between; a running task is cancelled, and another (deaf to SIGTERM) killed, through the API;
on Redis a higher priority jumps the agent's queue (on RabbitMQ without priority queues, a
priority is refused when the task is made)."""

import json
import subprocess
import sys
from datetime import timedelta

import psutil
import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import JsonResponse
from django.test import override_settings
from django.urls import path
from rest_framework.test import APIClient

from tests import task_functions as tasks
from tests.integration.harness import ROOT, read_markers
from tests.workflows import mark
from workflows_app import broker, clock, tasks_framework
from workflows_app.engine import tick
from workflows_app.models import Execution

pytestmark = [pytest.mark.integration]

Status = tasks_framework.TaskResultStatus


# --- a project's views that enqueue ------------------------------------------------------------

def order_placed(request, x):
    """Enqueues in the view's transaction, as a view under ATOMIC_REQUESTS does."""
    with transaction.atomic():
        result = tasks.add.using(queue_name=request.GET["queue"]).enqueue(x, y=1)
    return JsonResponse({"result": result.id})


class Declined(Exception):
    pass


def order_declined(request, x):
    """Enqueues, then fails: its transaction rolls back, and the task with it."""
    try:
        with transaction.atomic():
            result = tasks.add.using(queue_name=request.GET["queue"]).enqueue(x, y=1)
            request.enqueued = result.id
            raise Declined()
    except Declined:
        return JsonResponse({"result": request.enqueued}, status=402)


urlpatterns = [path("orders/<int:x>", order_placed), path("declined/<int:x>", order_declined)]


def read_in_another_process(stack, task_name, result_id) -> dict:
    """``get_result`` in a process of its own (``manage.py shell``)."""
    code = ("import json; from tests import task_functions as t; "
            f"r = t.{task_name}.get_result({result_id!r}); "
            "print(json.dumps({'status': r.status, 'value': r.return_value if r.status == 'SUCCESSFUL' else None, "
            "'attempts': r.attempts, 'errors': [e.exception_class_path for e in r.errors]}))")
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=stack.env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def wait_for_status(stack, result, statuses, timeout=60):
    def reached():
        result.refresh()
        return result.status in statuses
    stack.wait_for(reached, timeout, f"task {result.id} to be {statuses}", describe=lambda: result.status)
    return result


@pytest.mark.django_db(transaction=True)
@override_settings(ROOT_URLCONF=__name__)
def test_tasks_enqueued_in_views_run_on_their_agent_retry_and_read_back_from_another_process(stack, client):
    host = stack.agent_name("tasks")
    agent = stack.start_agent(host)
    stack.start_manager(concurrency=2)
    stack.wait_for_agent(host)

    placed = client.get(f"/orders/41?queue={host}")
    declined = client.get(f"/declined/7?queue={host}")
    assert (placed.status_code, declined.status_code) == (200, 402)
    assert not Execution.objects.filter(pk=declined.json()["result"]).exists()  # rolled back with the view
    busy = tasks.twice_busy.using(queue_name=host).enqueue("tb")

    result = wait_for_status(stack, tasks.add.get_result(placed.json()["result"]), {Status.SUCCESSFUL})
    assert (result.return_value, result.worker_ids) == (42, [host])
    busy = wait_for_status(stack, busy, {Status.SUCCESSFUL, Status.FAILED})
    assert busy.status == Status.SUCCESSFUL and busy.attempts == 3
    assert busy.return_value == {"attempt": 3, "id": busy.id, "args": ["tb"]}
    assert [m["attempt"] for m in read_markers(stack.markers_dir, "tb")] == [1, 2, 3]
    assert [m["agent"] for m in read_markers(stack.markers_dir, "tb")] == [host] * 3
    # The framework's signals, sent where the task ran: a project's receiver ran in the agent's
    # pool process, and the framework's logger recorded each start and end, a failure with its traceback.
    signalled = read_markers(stack.markers_dir, f"signal-{busy.id}")
    assert [(m["status"], m["attempt"]) for m in signalled] == [
        ("RUNNING", 1), ("FAILED", 1), ("RUNNING", 2), ("FAILED", 2), ("RUNNING", 3), ("SUCCESSFUL", 3)]
    assert {m["agent"] for m in signalled} == {host}
    log = agent.log_text()
    assert f"Task id={result.id} path=tests.task_functions.add state=SUCCESSFUL" in log
    assert log.count(f"Task id={busy.id} path=tests.task_functions.twice_busy state=FAILED") == 2
    assert "RecoverableError: busy on attempt 2" in log.split(f"Task id={busy.id} path=tests.task_functions.twice_busy "
                                                              f"state=FAILED")[2]

    assert read_in_another_process(stack, "add", result.id) == {"status": "SUCCESSFUL", "value": 42, "attempts": 1,
                                                                "errors": []}
    assert read_in_another_process(stack, "twice_busy", busy.id) == {
        "status": "SUCCESSFUL", "value": busy.return_value, "attempts": 3,
        "errors": ["workflows_app.errors.RecoverableError"] * 2}
    # Nothing of the declined order ran, on the agent or the manager.
    assert Execution.objects.filter(workflow_id="django_task").count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_deferred_task_starts_at_its_time_though_its_manager_restarted(stack):
    manager = stack.start_manager(concurrency=2)
    stack.wait_for(lambda: "ready" in manager.log_text(), 60, "the manager to be ready")
    # Far enough ahead for the restart (SIGTERM's graceful shutdown, a new start) to end before it.
    due = clock.now() + timedelta(seconds=15)
    result = tasks.records.using(run_after=due).enqueue("deferred")
    assert result.status == Status.READY
    manager = stack.restart(manager)
    stack.wait_for(lambda: "ready" in manager.log_text(), 60, "the restarted manager to be ready")
    assert clock.now() < due, "the restart took past the task's time: nothing was deferred across it"
    result = wait_for_status(stack, result, {Status.SUCCESSFUL}, timeout=90)
    # Sent by the restarted manager's tick once due, not by the sweep for lost starts, which would
    # find it RESEND_AFTER_SECONDS later. From the tick to a pool process is a few hops, which a
    # loaded machine (tests side by side) delays by seconds: not by a third of that.
    assert due <= result.started_at < due + timedelta(seconds=tick.RESEND_AFTER_SECONDS / 3), (due, result.started_at)
    assert len(read_markers(stack.markers_dir, "deferred")) == 1


@pytest.mark.django_db(transaction=True)
def test_running_tasks_are_cancelled_and_killed_through_the_api(stack):
    host = stack.agent_name("stop")
    stack.start_agent(host)
    stack.start_manager(concurrency=2)
    stack.wait_for_agent(host)
    api = APIClient()
    api.force_authenticate(get_user_model().objects.create_superuser("ops", "ops@example.com", "pw"))

    polite = tasks.sleeps.using(queue_name=host).enqueue("polite", 8)
    deaf = tasks.stubborn.using(queue_name=host).enqueue("deaf", 120)
    # Cancelled while it runs (it sleeps 8 s): the cancel waits for it to end, as it cannot watch.
    wait_for_status(stack, polite, {Status.RUNNING})
    assert api.post(f"/api/v1/executions/{polite.id}", {"action": "cancel"}, format="json").status_code == 200
    polite = wait_for_status(stack, polite, {Status.FAILED, Status.SUCCESSFUL})
    assert polite.status == Status.FAILED and Execution.objects.get(pk=polite.id).status == "cancelled"
    assert polite.errors[-1].exception_class_path == "workflows_app.errors.OperationCancelled"

    wait_for_status(stack, deaf, {Status.RUNNING})
    [started] = read_markers(stack.markers_dir, "deaf")
    assert api.post(f"/api/v1/executions/{deaf.id}", {"action": "kill"}, format="json").status_code == 200
    deaf = wait_for_status(stack, deaf, {Status.FAILED, Status.SUCCESSFUL}, timeout=30)
    assert deaf.status == Status.FAILED and Execution.objects.get(pk=deaf.id).status == "cancelled"
    stack.wait_for(lambda: not psutil.pid_exists(started["pid"]), 15, "the killed task's process to be gone")


@pytest.mark.django_db(transaction=True)
def test_a_higher_priority_goes_first_in_an_agents_queue_on_redis(stack):
    if not broker.broker_is_redis():
        # RabbitMQ orders by priority only in queues declared with one: a priority the queues
        # cannot keep is refused when the task is made, never accepted and ignored.
        with pytest.raises(tasks_framework.InvalidTask, match="CELERY_TASK_QUEUE_MAX_PRIORITY"):
            tasks.records.using(priority=10)
        return
    host = stack.agent_name("prio")
    stack.start_agent(host, concurrency=1)
    stack.start_manager(concurrency=2)
    stack.wait_for_agent(host)
    blocker = tasks.held.using(queue_name=host).enqueue("blocker", "release")
    wait_for_status(stack, blocker, {Status.RUNNING})
    queued = [tasks.records.using(queue_name=host, priority=priority).enqueue(f"p{priority}")
              for priority in (-60, 0, 100, 30)]
    stack.wait_for(lambda: all(Execution.objects.get(pk=r.id).operations.filter(state="sent").exists() for r in queued),
                   60, "the four to wait in the agent's queue")
    mark(None, "release")
    for result in queued:
        wait_for_status(stack, result, {Status.SUCCESSFUL})
    started = sorted((marker["time"], tag) for tag in ("p-60", "p0", "p100", "p30")
                     for marker in read_markers(stack.markers_dir, tag))
    # Redis keeps Celery's four priority steps: 100 and 30 share the top one, then 0, then -60.
    assert [tag for _, tag in started][2:] == ["p0", "p-60"] and {tag for _, tag in started[:2]} == {"p100", "p30"}
