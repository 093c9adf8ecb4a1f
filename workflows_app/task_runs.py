"""A task of Django's Tasks framework run as a durable execution: the built-in workflow and
operation that run it, the tasks this process knows, the backend's options, and the
``TaskResult`` read back from the execution.

An enqueued task is an execution of the workflow ``django_task`` whose parameters name the task
(its module path), its arguments, its queue and its backend; the workflow runs one step, named
after the task, with the operation ``django_task`` on the agent named by the queue (the
manager's for the framework's default queue), which imports the task and calls it. So the task
is in the admin, the API, Flower and the metrics like any execution, is cancelled, killed and
resumed like one, and retried by the engine.

``workflows_app.django_tasks`` (the backend) is the door; this module is what the managers and
agents run, registered (:func:`register`) in every process whose ``TASKS`` names the backend.
"""

import traceback
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.module_loading import import_string

from workflows_app import registry, tasks_framework, values
from workflows_app.errors import NonRecoverableError, ParameterError, RegistrationError
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import EventType, ExecutionStatus, OperationState

#: The built-in workflow of a task's execution, and the operation of its one step.
TASK_WORKFLOW = "django_task"
TASK_OPERATION = "django_task"
#: The backend's path in ``TASKS``.
BACKEND_PATH = "workflows_app.django_tasks.SwitchyardBackend"

#: The backend's ``OPTIONS``: what each takes, checked by :func:`option_problems`. Each is the
#: step's own option of that name (``ctx.execute``); unset, the engine's defaults.
OPTIONS = {
    "max_retries": "a whole number of retries after the first attempt (-1: without limit)",
    "retry_interval": "seconds between two attempts (0 or more)",
    "timeout": "seconds an attempt may run (more than 0)",
}


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


_OPTION_FITS = {
    "max_retries": lambda value: _whole(value) and value >= -1,
    "retry_interval": lambda value: _number(value) and value >= 0,
    "timeout": lambda value: _number(value) and value > 0,
}


def option_problems(options) -> list[str]:
    """What is wrong with a backend's ``OPTIONS``, one line each."""
    if not isinstance(options, dict):
        return [f"OPTIONS must be a dict, not {type(options).__name__}"]
    problems = [f"OPTIONS has no {key!r}: the options are {', '.join(OPTIONS)}" for key in options if key not in OPTIONS]
    return problems + [f"OPTIONS[{key!r}] must be {OPTIONS[key]}, not {value!r}" for key, value in options.items()
                       if key in OPTIONS and value is not None and not _OPTION_FITS[key](value)]


def configured() -> bool:
    """Whether ``TASKS`` names Switchyard's backend (then this process runs tasks' executions)."""
    backends = getattr(settings, "TASKS", None)
    return isinstance(backends, dict) and any(
        isinstance(params, dict) and params.get("BACKEND") == BACKEND_PATH for params in backends.values())


def setup_problems() -> list[str]:
    """What keeps ``TASKS``' Switchyard backend from working, or its checks from running: the
    framework missing, or on Django 5.2 its app missing from ``INSTALLED_APPS``."""
    if not configured():
        return []
    if not tasks_framework.AVAILABLE:
        return [f"TASKS names {BACKEND_PATH}, but {tasks_framework.MISSING}"]
    if tasks_framework.APP is not None and tasks_framework.APP not in settings.INSTALLED_APPS:
        return [f"TASKS names {BACKEND_PATH}, but INSTALLED_APPS has no {tasks_framework.APP!r}: add it, so that "
                f"the tasks' system checks run"]
    return []


# --- the tasks this process knows ------------------------------------------------------------------

#: Task module path -> the backend alias of the Task made last under that path: every Task bound to
#: Switchyard's backend that this process made (the backend's ``validate_task`` records it).
_known: dict = {}


def remember(task):
    _known[task.module_path] = task.backend


def known_tasks() -> list[str]:
    """The module paths of the tasks this process made, sorted."""
    return sorted(_known)


def tasks_named(name) -> list[str]:
    """The module paths of the tasks this process made that ``name`` names: the path itself, or the
    name of the task's function."""
    return [path for path in sorted(_known) if name and (path == name or path.rpartition(".")[2] == name)]


def task_of(execution) -> str | None:
    """The module path of the task an execution runs, or None when it is not a task's execution."""
    if execution.workflow_id != TASK_WORKFLOW or not isinstance(execution.parameters, dict):
        return None
    task = execution.parameters.get("task")
    return task if isinstance(task, str) else None


def _switchyard_backend(alias):
    """The backend of ``alias`` if it is Switchyard's, else ``ParameterError``."""
    backends = getattr(settings, "TASKS", None) or {}
    if not isinstance(backends.get(alias), dict) or backends[alias].get("BACKEND") != BACKEND_PATH:
        raise ParameterError(f"parameter 'backend': TASKS has no backend {alias!r} of Switchyard's")
    return tasks_framework.task_backends[alias]


def check_parameters(parameters):
    """The check of a task's execution's parameters besides their types: the task is one this
    process made, of a Switchyard backend, on a queue that backend takes. A task is started by
    its ``enqueue()``, in a process that has it; from the API, the admin or a command, the task's
    module must be imported by the process (list it in ``SWITCHYARD_WORKFLOW_MODULES``)."""
    path = parameters["task"]
    if path not in _known:
        raise ParameterError(f"parameter 'task': no task {path!r} of a Switchyard backend is loaded here (a module "
                             f"named in SWITCHYARD_WORKFLOW_MODULES is, with the tasks it defines)")
    backend = _switchyard_backend(parameters.get("backend", _known[path]))
    queue = parameters.get("queue_name", tasks_framework.DEFAULT_TASK_QUEUE_NAME)
    if backend.queues and queue not in backend.queues:
        raise ParameterError(f"parameter 'queue_name': the backend {backend.alias!r} takes the queues "
                             f"{', '.join(sorted(backend.queues))}, not {queue!r}")
    check_queue_name(queue, "parameter 'queue_name'")


def agent_of(queue_name) -> str | None:
    """The agent queue of a task's ``queue_name``: the manager's for the framework's default queue."""
    return None if queue_name == tasks_framework.DEFAULT_TASK_QUEUE_NAME else queue_name


def check_queue_name(queue_name, place=""):
    """``ValueRefused`` (naming ``place``) unless a task's ``queue_name`` names the managers (the
    framework's default queue) or a name an agent can have (``values.check_agent_name``)."""
    agent = agent_of(queue_name)
    if agent:  # "", as no agent: the managers
        values.check_agent_name(agent, place)


def resolve(path):
    """The task at module path ``path``, imported as Django's own ``Task`` pickling does, or
    ``NonRecoverableError``: trying again would not make it a task."""
    try:
        task = import_string(path)
    except ImportError as exc:
        raise NonRecoverableError(f"task {path!r} cannot be imported: {exc}") from None
    if not isinstance(task, tasks_framework.Task):
        raise NonRecoverableError(f"{path!r} is not a task (decorate it with @task)")
    return task


# --- what the managers and the agents run ----------------------------------------------------------

def run_task(ctx, task: str, args: list = (), kwargs: dict[str, Any] | None = None, queue_name: str = "default",
             backend: str = "default"):
    """The workflow of an enqueued task: one step, the task, on its queue's agent, with the
    backend's options; its result is the task's return value, which its payload keeps as
    ``return_value``."""
    options = {key: value for key, value in _switchyard_backend(backend).options.items() if value is not None}
    value = ctx.await_execute(task, TASK_OPERATION, task, list(args), kwargs or {}, agent=agent_of(queue_name),
                              **options)
    ctx.set_payload({"return_value": value})  # on the execution's page and in the API, as any payload
    return value


def call_task(ctx, path, args, kwargs):
    """The operation of a task's step, on an agent: import the task and call it (with its
    context first when it takes one); its return value as JSON.

    Each attempt sends the framework's signals as its own backends do, in this process:
    ``task_started`` before the call, ``task_finished`` after it — ``SUCCESSFUL`` with the return
    value, or ``FAILED`` with the error, sent while the exception is handled so that the
    framework's logger records its traceback. (An attempt that fails retryably is followed by
    another attempt: its own started and finished.)"""
    task = resolve(path)
    running = _attempt_result(ctx, task, args, kwargs)
    started_at = running.started_at
    sender = type(task.get_backend())
    tasks_framework.task_started.send(sender, task_result=running)
    try:
        if task.takes_context:
            value = task.call(tasks_framework.TaskContext(task_result=running), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = tasks_framework.normalize_json(value)
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt):
            failed = _attempt_result(ctx, task, args, kwargs, tasks_framework.TaskResultStatus.FAILED, started_at,
                                     errors=[tasks_framework.TaskError(
                                         exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                                         traceback="".join(traceback.format_exception(exc)))])
            tasks_framework.task_finished.send(sender, task_result=failed)
        raise
    done = _attempt_result(ctx, task, args, kwargs, tasks_framework.TaskResultStatus.SUCCESSFUL, started_at)
    object.__setattr__(done, "_return_value", value)
    tasks_framework.task_finished.send(sender, task_result=done)
    return value


def _attempt_result(ctx, task, args, kwargs, status=None, started_at=None, errors=()):
    """The ``TaskResult`` of this attempt as the task sees it: the execution's id, this agent
    once per attempt so far (``attempts``), and its times."""
    now = timezone.now()
    started_at = started_at or now
    ended = status is not None
    return tasks_framework.TaskResult(
        task=task, id=str(ctx.execution_id), status=status or tasks_framework.TaskResultStatus.RUNNING,
        enqueued_at=None, started_at=started_at, finished_at=now if ended else None, last_attempted_at=started_at,
        args=args, kwargs=kwargs, backend=task.backend, errors=list(errors), worker_ids=[ctx.agent] * ctx.attempt)


def register():
    """Register the built-in workflow and operation (again: a no-op)."""
    registry.operation(call_task, name=TASK_OPERATION)
    registry.workflow(run_task, name=TASK_WORKFLOW).validate = check_parameters


# --- the result, read back ---------------------------------------------------------------------------

#: Where an error the engine made (not an exception the task raised) has no class of its own.
_ENGINE_ERRORS = {"Cancelled": "workflows_app.errors.OperationCancelled", "Killed": "workflows_app.errors.OperationCancelled",
                  ExecutionStatus.CANCELLED: "workflows_app.errors.OperationCancelled",
                  "OperationTimeout": "builtins.TimeoutError", ExecutionStatus.TIMED_OUT: "builtins.TimeoutError"}
_OTHER_ERROR = "workflows_app.errors.WorkflowError"


def error_of(error: dict):
    """A ``TaskError`` of an operation's stored error."""
    path = error.get("class") or _ENGINE_ERRORS.get(error.get("type"), _OTHER_ERROR)
    return tasks_framework.TaskError(exception_class_path=path,
                                     traceback=error.get("traceback") or error.get("message", ""))


def status_of(execution, operation):
    """The framework's status of a task's execution: READY until its step starts (pending,
    queued, deferred, sent, waiting for a retry), RUNNING while it runs or is being stopped,
    SUCCESSFUL once completed, FAILED once it failed, was cancelled or killed, or timed out."""
    done = tasks_framework.TaskResultStatus
    if execution.status == ExecutionStatus.COMPLETED:
        return done.SUCCESSFUL
    if execution.is_terminal:
        return done.FAILED
    if operation is not None and operation.state == OperationState.STARTED:
        return done.RUNNING
    return done.READY


def result(result_id):
    """The ``TaskResult`` of the task execution ``result_id``, read from the database (so from
    any process, after any restart), or ``TaskResultDoesNotExist``."""
    try:
        execution = Execution.objects.get(pk=result_id, workflow_id=TASK_WORKFLOW)
    except (Execution.DoesNotExist, ValidationError):  # a malformed id names no execution either
        raise tasks_framework.TaskResultDoesNotExist(result_id) from None
    parameters = execution.parameters
    try:
        task = resolve(parameters["task"])
    except NonRecoverableError as exc:
        raise RegistrationError(f"the task of result {result_id}: {exc}") from None
    task = task.using(priority=execution.priority, queue_name=parameters.get("queue_name"),
                      run_after=execution.run_after, backend=parameters.get("backend"))
    operation = Operation.objects.filter(execution=execution).first()
    starts, errors = [], []
    # Each attempt's start, and each failed attempt's error (kept with its event).
    events = Event.objects.filter(execution=execution, type__in=(EventType.TASK_STARTED, EventType.TASK_RESCHEDULED,
                                                                 EventType.TASK_FAILED))
    for event in events.order_by("id"):
        if event.type == EventType.TASK_STARTED:
            starts.append(event)
        elif event.data.get("error"):
            errors.append(error_of(event.data["error"]))
    ended_otherwise = operation is None or operation.state != OperationState.FAILED
    if execution.is_terminal and execution.status != ExecutionStatus.COMPLETED and ended_otherwise:
        # Cancelled, killed, timed out, or failed before its step ran: why, as its last error.
        stored = operation.error if operation is not None and operation.error else None
        errors.append(error_of(stored or {"type": execution.status, "message": execution.error}))
    found = tasks_framework.TaskResult(
        task=task, id=str(execution.pk), status=status_of(execution, operation), enqueued_at=execution.created_at,
        started_at=starts[0].timestamp if starts else None, finished_at=execution.ended_at,
        last_attempted_at=starts[-1].timestamp if starts else None, args=parameters.get("args", []),
        kwargs=parameters.get("kwargs") or {}, backend=task.backend, errors=errors,
        worker_ids=[event.data.get("agent") or "manager" for event in starts])
    if execution.status == ExecutionStatus.COMPLETED and operation is not None:
        object.__setattr__(found, "_return_value", operation.result)
    return found

