"""Switchyard as a backend of Django's Tasks framework (``django.tasks`` on Django 6, the
``django-tasks`` package on Django 5.2)::

    TASKS = {"default": {"BACKEND": "workflows_app.django_tasks.SwitchyardBackend",
                         "QUEUES": ["default", "host-1"], "OPTIONS": {"max_retries": 3}}}

Each ``enqueue()`` stores a durable execution of the task (``workflows_app.task_runs``) in the
caller's transaction and sends it to a manager once that commits: a rollback leaves nothing.
``run_after`` defers its start to a stored time, which the managers' tick keeps; ``priority``
places its message in its agent's queue. ``get_result()`` reads the execution back, from any
process. The framework's ``task_enqueued`` signal is sent here, in the process that enqueued;
``task_started`` and ``task_finished`` where the task runs (``workflows_app.task_runs``). The backend is a door like the API: it parses, calls ``services.start`` and reads.
"""

from django.core import checks

from workflows_app import broker, services, task_runs, tasks_framework
from workflows_app.errors import ValueRefused

if not tasks_framework.AVAILABLE:
    raise ImportError(tasks_framework.MISSING)


class SwitchyardBackend(tasks_framework.BaseTaskBackend):
    """Each task a durable execution: in the admin, the API, Flower and the metrics; cancelled,
    killed and resumed like any execution; retried (``RecoverableError``, a lost worker) as the
    ``OPTIONS`` say; surviving the restart of any process."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True

    def enqueue(self, task, args, kwargs):
        self.validate_task(task)
        # Made first, as the framework's own backends do: it refuses arguments JSON cannot hold.
        tasks_framework.TaskResult(
            task=task, id="", status=tasks_framework.TaskResultStatus.READY, enqueued_at=None, started_at=None,
            finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs, backend=self.alias, errors=[],
            worker_ids=[])
        execution = services.start(
            task_runs.TASK_WORKFLOW,
            {"task": task.module_path, "args": tasks_framework.normalize_json(list(args)),
             "kwargs": tasks_framework.normalize_json(dict(kwargs)), "queue_name": task.queue_name,
             "backend": self.alias},
            run_after=task.run_after, priority=task.priority)
        enqueued = self.get_result(str(execution.pk))
        tasks_framework.task_enqueued.send(type(self), task_result=enqueued)
        return enqueued

    def get_result(self, result_id):
        return task_runs.result(result_id)

    @property
    def supports_priority(self):
        """On Redis always; on RabbitMQ where the queues are priority queues (Celery's
        ``task_queue_max_priority``), which RabbitMQ needs to order messages by priority."""
        return broker.broker_is_redis() or broker.project_app().conf.task_queue_max_priority is not None

    def validate_task(self, task):
        if task.priority != tasks_framework.DEFAULT_TASK_PRIORITY and not self.supports_priority:
            raise tasks_framework.InvalidTask(
                f"task {task.module_path}: priority {task.priority} cannot be kept: RabbitMQ orders messages by "
                f"priority only in queues declared with one (set CELERY_TASK_QUEUE_MAX_PRIORITY = 10 before the "
                f"agents' queues are first declared)")
        super().validate_task(task)
        try:
            task_runs.check_queue_name(task.queue_name)
        except ValueRefused as refused:
            raise tasks_framework.InvalidTask(f"task {task.module_path}: queue_name: {refused.reason}") from None
        task_runs.remember(task)

    def check(self, **kwargs):
        problems = task_runs.option_problems(self.options)
        for queue in sorted(self.queues):
            try:
                task_runs.check_queue_name(queue)
            except ValueRefused as refused:
                problems.append(f"QUEUES: {refused.reason}")
        return [checks.Error(f"TASKS[{self.alias!r}]: {problem}", id="workflows.E008") for problem in problems]
