"""The Switchyard backend of Django's Tasks framework (``workflows_app.django_tasks``), run in the
test harness: its operations in this process, its clock the test's. Each task enqueued is an
execution of ``django_task`` with one step named after the task; ``get_result`` maps it back —
status, return value, errors of each attempt, attempts, workers; ``run_after`` waits on the
stored time; the backend's options become the step's; an enqueue in a transaction that rolls
back leaves nothing; tasks the framework or the backend cannot run are refused at once; the
backend's system checks. The same tests run on the framework of Django 5.2 (the django-tasks
package) and of Django 6 (``django.tasks``) in the lanes."""

from datetime import datetime, timedelta

import pytest
from django.core import checks
from django.db import transaction
from django.test import TestCase, override_settings

from tests import task_functions as tasks
from workflows_app import broker, services, task_runs, tasks_framework
from workflows_app.conf import workflows_settings
from workflows_app.errors import ParameterError
from workflows_app.models import Execution

Status = tasks_framework.TaskResultStatus
BACKEND = "workflows_app.django_tasks.SwitchyardBackend"


def backend_settings(**options):
    return {"default": {"BACKEND": BACKEND, "QUEUES": [], "OPTIONS": options}}


@pytest.fixture
def with_options():
    """Settings the backend is made anew from: ``with_options(max_retries=0)``."""
    stack = []

    def apply(**options):
        overridden = override_settings(TASKS=backend_settings(**options))
        overridden.enable()
        stack.append(overridden)

    yield apply
    for overridden in reversed(stack):
        overridden.disable()


def test_an_enqueued_task_is_an_execution_of_one_step_and_its_result_reads_back(switchyard):
    with TestCase.captureOnCommitCallbacks() as sent:
        result = tasks.add.enqueue(2, y=3)
    assert result.status == Status.READY and not result.is_finished and result.backend == "default"
    assert len(sent) == 1  # its start goes to a manager once the enqueue's transaction commits
    execution = Execution.objects.get(pk=result.id)
    assert execution.workflow_id == task_runs.TASK_WORKFLOW
    assert execution.parameters == {"task": "tests.task_functions.add", "args": [2], "kwargs": {"y": 3},
                                    "queue_name": "default", "backend": "default"}
    ran = switchyard.enqueue(tasks.add, 2, y=3)
    assert ran.status == "completed" and list(ran.operations) == ["tests.task_functions.add"]
    # The default queue is the managers' own.
    assert ran.operations["tests.task_functions.add"].agent == workflows_settings.MANAGEMENT_QUEUE
    result = tasks.add.get_result(ran.id)
    assert (result.status, result.return_value, result.errors, result.attempts) == (Status.SUCCESSFUL, 5, [], 1)
    assert Execution.objects.get(pk=ran.id).payload == {"return_value": 5}, "on its page and in the API"
    assert result.enqueued_at <= result.started_at == result.last_attempted_at <= result.finished_at
    got = tasks.add.get_result(result.id)
    assert (got.status, got.return_value, got.args, got.kwargs) == (Status.SUCCESSFUL, 5, [2], {"y": 3})
    assert got.task.func is tasks.add.func


def test_a_task_that_raises_fails_with_its_error(switchyard):
    result = tasks.fails.get_result(switchyard.enqueue(tasks.fails, "no stock").id)
    assert result.status == Status.FAILED and result.attempts == 1
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value
    [error] = result.errors
    assert error.exception_class is ValueError and "no stock" in error.traceback
    assert "Traceback" in error.traceback


#: The framework's own logger, which its receivers of the signals write to.
LOGGER = "django.tasks" if tasks_framework.APP is None else "django_tasks"


@pytest.fixture
def signals():
    """What the framework's signals carried, in the order sent: ``(signal name, status, result id)``."""
    sent = []
    receivers = {name: (lambda sender, task_result, name=name, **kwargs: sent.append(
        (name, task_result.status, task_result.id, sender))) for name in ("task_enqueued", "task_started", "task_finished")}
    for name, receiver in receivers.items():
        getattr(tasks_framework, name).connect(receiver)
    yield sent
    for name, receiver in receivers.items():
        getattr(tasks_framework, name).disconnect(receiver)


def test_the_frameworks_signals_are_sent_and_its_logger_records_each_start_and_end(switchyard, signals):
    with TestCase.captureOnCommitCallbacks(execute=False):
        enqueued = tasks.add.enqueue(1)
    assert [name for name, *_ in signals] == ["task_enqueued"] and signals[0][1:3] == (Status.READY, enqueued.id)
    assert signals[0][3] is type(tasks.add.get_backend())
    signals.clear()
    with TestCase().assertLogs(LOGGER, "INFO") as logged:
        ran = switchyard.enqueue(tasks.add, 2, y=3)
    assert [(name, status, result_id) for name, status, result_id, _ in signals] == [
        ("task_enqueued", Status.READY, str(ran.id)), ("task_started", Status.RUNNING, str(ran.id)),
        ("task_finished", Status.SUCCESSFUL, str(ran.id))]
    assert [record.getMessage() for record in logged.records][-2:] == [
        f"Task id={ran.id} path=tests.task_functions.add state=RUNNING",
        f"Task id={ran.id} path=tests.task_functions.add state=SUCCESSFUL"]


def test_a_failed_task_is_logged_with_its_traceback_as_error_monitoring_reads_it(switchyard, signals):
    with TestCase().assertLogs(LOGGER, "ERROR") as logged:
        ran = switchyard.enqueue(tasks.fails, "no stock")
    assert [(name, status) for name, status, *_ in signals][-1] == ("task_finished", Status.FAILED)
    [record] = logged.records
    assert record.getMessage() == f"Task id={ran.id} path=tests.task_functions.fails state=FAILED"
    assert record.exc_info and record.exc_info[0] is ValueError and "no stock" in str(record.exc_info[1])


def test_recoverable_errors_are_retried_and_each_attempt_is_counted(switchyard, with_options):
    with_options(retry_interval=1)
    ran = switchyard.finish(switchyard.enqueue(tasks.twice_busy, "tb"))
    result = tasks.twice_busy.get_result(ran.id)
    assert result.status == Status.SUCCESSFUL and result.attempts == 3
    assert result.return_value == {"attempt": 3, "id": result.id, "args": ["tb"]}
    assert [error.exception_class_path for error in result.errors] == ["workflows_app.errors.RecoverableError"] * 2
    assert "busy on attempt 1" in result.errors[0].traceback and "busy on attempt 2" in result.errors[1].traceback
    step = ran.operations["tests.task_functions.twice_busy"]
    assert (step.retry_interval, step.attempt) == (1, 3)


def test_max_retries_of_the_options_ends_the_retries(switchyard, with_options):
    with_options(max_retries=1)
    result = tasks.twice_busy.get_result(switchyard.finish(switchyard.enqueue(tasks.twice_busy, "tb")).id)
    assert result.status == Status.FAILED and result.attempts == 2 and len(result.errors) == 2


def test_timeout_of_the_options_is_the_steps(switchyard, with_options):
    with_options(timeout=7.5)
    ran = switchyard.enqueue(tasks.add, 1)
    assert ran.operations["tests.task_functions.add"].timeout == 7.5


def test_run_after_keeps_it_ready_until_the_stored_time(switchyard):
    due = switchyard.clock.now() + timedelta(hours=2)
    result = tasks.add.get_result(switchyard.enqueue(tasks.add.using(run_after=due), 1, 1).id)
    execution = Execution.objects.get(pk=result.id)
    assert (execution.status, execution.run_after) == ("pending", due)
    switchyard.advance(hours=1, minutes=59)
    result.refresh()
    assert Execution.objects.get(pk=result.id).status == "pending" and result.status == Status.READY
    # An early advance (a manager's start sends one to every pending execution) starts nothing.
    broker.send_advance(result.id)
    switchyard.advance(seconds=1)
    assert Execution.objects.get(pk=result.id).status == "pending"
    switchyard.advance(minutes=1)
    result.refresh()
    assert result.status == Status.SUCCESSFUL and due <= result.started_at < due + timedelta(seconds=1)
    assert result.task.run_after == due


def test_priority_and_queue_are_stored_and_read_back(switchyard):
    ran = switchyard.start("django_task", {"task": "tests.task_functions.add", "args": [1], "queue_name": "host-9"},
                           priority=40)
    result = tasks.add.get_result(ran.id)
    assert ran.execution.priority == 40 and ran.execution.parameters["queue_name"] == "host-9"
    assert (result.task.priority, result.task.queue_name) == (40, "host-9")
    assert ran.operations["tests.task_functions.add"].agent == "host-9"


@pytest.mark.parametrize("priority, redis, rabbitmq", [(-100, 9, 0), (-51, 8, 1), (-1, 6, 3), (0, 3, 6), (1, 2, 7),
                                                       (45, 1, 8), (100, 0, 9)])
def test_a_priority_above_the_default_goes_ahead_of_it_in_every_step_of_redis(priority, redis, rabbitmq):
    # kombu's default Redis steps are 0, 3, 6 and 9: each message falls in the step at or below its
    # priority, so above the default is the first step, the default the second, below it the others.
    assert broker.message_priority(priority, redis=True) == redis
    assert broker.message_priority(priority, redis=False) == rabbitmq


def test_takes_context_gives_the_attempt_and_the_result_id(switchyard, with_options):
    with_options(retry_interval=0)
    result = tasks.twice_busy.get_result(switchyard.finish(switchyard.enqueue(tasks.twice_busy, "ctx")).id)
    assert result.return_value["attempt"] == 3 and result.return_value["id"] == result.id


def test_an_async_task_runs(switchyard):
    result = tasks.async_add.get_result(switchyard.enqueue(tasks.async_add, 2, 2).id)
    assert result.return_value == 4


def test_an_enqueue_in_a_transaction_that_rolls_back_leaves_nothing(switchyard):
    before = Execution.objects.count()
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            tasks.add.enqueue(1)
            raise RuntimeError("the view failed")
    assert Execution.objects.count() == before
    switchyard.advance(seconds=60)
    assert Execution.objects.count() == before


def test_arguments_json_cannot_hold_are_refused_before_anything_is_stored(switchyard):
    before = Execution.objects.count()
    with pytest.raises(TypeError):
        tasks.add.enqueue(object())
    assert Execution.objects.count() == before


def test_a_return_value_json_cannot_hold_fails_the_task(switchyard):
    result = tasks.returns_a_set.get_result(switchyard.enqueue(tasks.returns_a_set).id)
    assert result.status == Status.FAILED and result.errors[0].exception_class is TypeError


def test_a_cancelled_task_failed_and_says_so(switchyard):
    ran = switchyard.enqueue(tasks.add.using(run_after=switchyard.clock.now() + timedelta(minutes=5)), 1)
    switchyard.cancel(ran)
    switchyard.advance(minutes=10)
    result = tasks.add.get_result(ran.id)
    assert result.status == Status.FAILED and result.errors[-1].exception_class_path.endswith("OperationCancelled")


def test_get_result_of_an_unknown_or_malformed_id_or_of_another_workflows_execution(switchyard):
    other = Execution.objects.create(workflow_id="demo")
    for result_id in ("not-a-uuid", "00000000-0000-0000-0000-000000000000", str(other.pk)):
        with pytest.raises(tasks_framework.TaskResultDoesNotExist):
            tasks.add.get_result(result_id)


def test_tasks_the_backend_cannot_keep_are_refused_when_made():
    with pytest.raises(tasks_framework.InvalidTask, match="aware"):
        tasks.add.using(run_after=datetime(2030, 1, 1))
    with pytest.raises(tasks_framework.InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default", "host-1"]}}):
        with pytest.raises(tasks_framework.InvalidTask, match="host-2"):
            tasks.add.using(queue_name="host-2")


@pytest.mark.django_db
def test_a_start_from_another_door_must_name_a_loaded_task_of_the_backend():
    with pytest.raises(ParameterError, match="no task 'os.system'"):
        services.start(task_runs.TASK_WORKFLOW, {"task": "os.system", "args": ["true"]})
    with pytest.raises(ParameterError, match="TASKS has no backend 'other'"):
        services.start(task_runs.TASK_WORKFLOW, {"task": "tests.task_functions.add", "backend": "other"})
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default"]}}):
        with pytest.raises(ParameterError, match="not 'host-3'"):
            services.start(task_runs.TASK_WORKFLOW, {"task": "tests.task_functions.add", "queue_name": "host-3"})
    assert not Execution.objects.exists()


@pytest.mark.parametrize("queue_name", ["celery.pidbox", "amq.gen-1", "celeryev", "management", "management.reports",
                                        "host-1.replies.box.1", "two words"])
def test_a_queue_name_no_agent_can_have_is_refused_when_the_task_is_made(queue_name):
    with pytest.raises(tasks_framework.InvalidTask, match=f"queue_name: invalid agent name {queue_name!r}"):
        tasks.add.using(queue_name=queue_name)
    with pytest.raises(tasks_framework.InvalidTask, match="invalid agent name"):
        tasks_framework.task(queue_name=queue_name)(tasks.add.func)


@pytest.mark.django_db
@pytest.mark.parametrize("queue_name", ["celery.pidbox", "amq.gen-1", "management"])
def test_a_queue_name_no_agent_can_have_is_refused_from_another_door(queue_name):
    with pytest.raises(ParameterError, match=f"parameter 'queue_name': invalid agent name {queue_name!r}"):
        services.start(task_runs.TASK_WORKFLOW, {"task": "tests.task_functions.add", "queue_name": queue_name})
    assert not Execution.objects.exists()


@pytest.mark.django_db
def test_queues_no_agent_can_have_are_a_system_check_error():
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["default", "host-1", "celery.pidbox"]}}):
        errors = [e for e in checks.run_checks() if e.id.startswith("workflows.")]
    assert [e.id for e in errors] == ["workflows.E008"]
    assert "QUEUES: invalid agent name 'celery.pidbox'" in errors[0].msg


@pytest.mark.django_db
@pytest.mark.parametrize("options, found", [
    ({"max_retries": -2}, "max_retries"), ({"retry_interval": "5"}, "retry_interval"), ({"timeout": 0}, "timeout"),
    ({"retries": 3}, "'retries'"), ({"max_retries": True}, "max_retries"),
])
def test_options_that_cannot_work_are_a_system_check_error(options, found):
    with override_settings(TASKS=backend_settings(**options)):
        errors = [e for e in checks.run_checks() if e.id.startswith("workflows.")]
    assert [e.id for e in errors] == ["workflows.E008"] and found in errors[0].msg


@pytest.mark.django_db
def test_good_options_pass_the_checks():
    with override_settings(TASKS=backend_settings(max_retries=-1, retry_interval=0.5, timeout=30)):
        assert [e for e in checks.run_checks() if e.id.startswith("workflows.")] == []


@pytest.mark.django_db
def test_the_framework_or_its_app_missing_is_a_system_check_error(monkeypatch):
    # Where the framework is an app of its own (Django 5.2's django_tasks) but not installed, its
    # checks, this backend's included, would never run.
    monkeypatch.setattr(tasks_framework, "APP", "an_app_not_installed")
    errors = [e for e in checks.run_checks() if e.id.startswith("workflows.")]
    assert [e.id for e in errors] == ["workflows.E009"] and "'an_app_not_installed'" in errors[0].msg
    monkeypatch.setattr(tasks_framework, "AVAILABLE", False)
    errors = [e for e in checks.run_checks() if e.id.startswith("workflows.")]
    assert [e.id for e in errors] == ["workflows.E009"] and "django-switchyard[tasks]" in errors[0].msg
