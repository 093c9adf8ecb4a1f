"""Django's Tasks framework under whichever name this installation has it: ``django.tasks``
(Django 6.0 and later) or the ``django-tasks`` package (Django 5.2, Switchyard's ``tasks``
extra). The two have one API; what differs is where it lives, the name of the invalid-task
error (``InvalidTask``, ``InvalidTaskError`` in the package) and, on Django 5.2, that the
package is an app of its own (``INSTALLED_APPS`` needs ``"django_tasks"`` for its system
checks to run). Everything else of Switchyard imports the framework from here — its signals too,
whose module connects the framework's own receivers (its ``django_tasks`` / ``django.tasks``
logger).

``AVAILABLE`` is False when neither is installed; the names below are then missing.
"""

import django

#: The app that registers the framework's system checks, where it is not Django itself.
APP = None if django.VERSION >= (6, 0) else "django_tasks"

try:
    if APP is None:
        from django.tasks import DEFAULT_TASK_QUEUE_NAME, Task, TaskContext, TaskResult, TaskResultStatus, task, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import DEFAULT_TASK_PRIORITY, TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json
    else:
        from django_tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus, task, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import DEFAULT_TASK_PRIORITY, Task, TaskError
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
except ImportError:
    AVAILABLE = False
else:
    AVAILABLE = True

#: What to install where the framework is missing.
MISSING = ("Django's Tasks framework is not installed: on Django 5.2 install the django-tasks package "
           "(pip install \"django-switchyard[tasks]\"); Django 6 has it built in")

__all__ = [
    "APP", "AVAILABLE", "MISSING", "DEFAULT_TASK_PRIORITY", "DEFAULT_TASK_QUEUE_NAME", "BaseTaskBackend", "InvalidTask", "Task",
    "TaskContext", "TaskError", "TaskResult", "TaskResultDoesNotExist", "TaskResultStatus", "normalize_json",
    "task", "task_backends", "task_enqueued", "task_finished", "task_started",
]
