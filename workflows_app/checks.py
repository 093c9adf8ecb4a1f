"""System checks of what the project gives Switchyard: its settings, its Celery app, its
workflow modules, its database and its environment.

* ``workflows.E001``: ``WORKFLOWS`` has a key that is not a setting (or is not a dict).
* ``workflows.E002``: a ``WORKFLOWS`` value that cannot work.
* ``workflows.E003``: the project has no Celery app for Switchyard to use.
* ``workflows.W004``: the project's SQLite options cannot work with several writing processes
  (:mod:`workflows_app.db`).
* ``workflows.E005``: ``SWITCHYARD_WORKFLOW_MODULES`` is not a list of names, or names a module
  that cannot be imported (:mod:`workflows_app.registry`).
* ``workflows.E006``, ``workflows.W007``: a Switchyard environment variable is set that this
  project's settings do not read (:mod:`workflows_app.environment`); an error when what
  Switchyard does would change, a warning when the variable only tunes or logs.
* ``workflows.E008``: the ``OPTIONS`` of a ``TASKS`` backend of Switchyard's that cannot work
  (the backend's own check, run by Django's Tasks framework: :mod:`workflows_app.django_tasks`).
* ``workflows.E009``: ``TASKS`` names Switchyard's backend where Django's Tasks framework is
  missing, or (Django 5.2) where its app is not installed, so its checks would not run.
"""

from django.conf import settings
from django.core.checks import Error, register
from django.core.checks import Warning as CheckWarning

from workflows_app import broker, conf, db, environment, registry, task_runs

_HINT = "See workflows_app.conf.DEFAULTS for the keys and their meaning."


@register()
def check_workflows_settings(app_configs=None, **kwargs):
    user = getattr(settings, "WORKFLOWS", None) or {}
    return [Error(problem, hint=_HINT, id="workflows.E001") for problem in conf.unknown_keys(user)] + [
        Error(problem, hint=_HINT, id="workflows.E002") for problem in conf.bad_values(user)
    ]


@register()
def check_celery_app(app_configs=None, **kwargs):
    if broker.project_app() is not None:
        return []
    return [Error("the project has no Celery app: Switchyard sends every message through the project's own",
                  hint="Define it in <project>/celery.py and import it in <project>/__init__.py, as Celery's "
                       "'First steps with Django' shows.", id="workflows.E003")]


@register()
def check_sqlite(app_configs=None, **kwargs):
    return [CheckWarning(problem, id="workflows.W004") for problem in db.sqlite_problems()]


@register()
def check_workflow_modules(app_configs=None, **kwargs):
    return [Error(problem, id="workflows.E005") for problem in registry.module_problems()]


@register()
def check_environment(app_configs=None, **kwargs):
    return [(Error if variable.error else CheckWarning)(environment.message(variable, value),
                                                   id="workflows.E006" if variable.error else "workflows.W007")
            for variable, value in environment.ignored()]


@register()
def check_tasks_framework(app_configs=None, **kwargs):
    return [Error(problem, id="workflows.E009") for problem in task_runs.setup_problems()]
