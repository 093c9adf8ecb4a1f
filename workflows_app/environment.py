"""Switchyard's environment variables that only a project's settings read, and whether they do.

Some variables are read by the apps themselves, in any project: ``SWITCHYARD_VAR_DIR``,
``SWITCHYARD_WORKFLOW_MODULES`` (when the setting of that name is not set), Flower's
``FLOWER_BASIC_AUTH``, and Celery's own ``CELERY_BROKER_URL`` and ``CELERY_RESULT_BACKEND``.
The others below are read by this repository's demo project's settings (``switchyard/settings.py``,
which its docker set-up runs too) and by nothing else: in another project, setting one changes
nothing unless that project's settings read it. So when one is set, the project's settings must
carry its value — they read it, as the demo's do, or set the same themselves —, or the system
check says so: ``workflows.E006`` for a variable whose loss changes what Switchyard does,
``workflows.W007`` for one that only tunes or logs. ``SWITCHYARD_WORKFLOW_MODULES`` is among them
for the one case where it is lost: the setting of that name is set too, and names other modules.
The check compares values: it needs no mark of which project read what, and it is quiet
wherever the value arrived.

Generic names that many projects read in their own way (``DATABASE_URL``, ``DJANGO_DEBUG``,
``DJANGO_SECRET_KEY``, ``DJANGO_ALLOWED_HOSTS``) are not checked: their meaning is the project's.
"""

import json
import logging
import os
from dataclasses import dataclass

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from workflows_app import broker

_MISSING = object()


@dataclass(frozen=True)
class ProjectVariable:
    """An environment variable that only a project's settings read."""

    name: str
    #: Whether a setting of the project's carries ``value`` (the variable's text).
    carried: object
    #: What a project sets instead, said to whoever set the variable.
    instead: str
    #: True: an error (what Switchyard does changes); False: a warning.
    error: bool = True
    #: Why the value is lost.
    why: str = "this project's settings do not read it (only Switchyard's own demo project's do)"


def _workflows_carried(value) -> bool:
    try:
        wanted = json.loads(value)
    except ValueError:
        return False
    configured = getattr(settings, "WORKFLOWS", None) or {}
    return isinstance(wanted, dict) and isinstance(configured, dict) and all(
        configured.get(key, _MISSING) == wanted[key] for key in wanted)


def _modules_carried(value) -> bool:
    configured = getattr(settings, "SWITCHYARD_WORKFLOW_MODULES", None)
    if configured is None:
        return True  # the apps read the variable themselves then
    wanted = [name.strip() for name in value.split(",") if name.strip()]
    return isinstance(configured, (list, tuple)) and [name for name in configured if name] == wanted


def _log_level_carried(value) -> bool:
    return logging.getLogger().level == logging.getLevelName(value.strip().upper())


def _queue_type_carried(value) -> bool:
    app = broker.project_app()
    if app is None:
        return True  # workflows.E003 says what is wrong
    return all(app.conf.get(key) == value.strip() for key in ("task_default_queue_type", "task_create_missing_queue_type"))


def _conn_max_age_carried(value) -> bool:
    try:
        wanted = int(value)
    except ValueError:
        return False
    return connections[DEFAULT_DB_ALIAS].settings_dict.get("CONN_MAX_AGE") == wanted


def _prepare_threshold_carried(value) -> bool:
    if connections[DEFAULT_DB_ALIAS].vendor != "postgresql":
        return True  # it means nothing on another database
    text = value.strip().lower()
    if text in ("", "none"):
        wanted = None
    else:
        try:
            wanted = int(text)
        except ValueError:
            return False
    options = connections[DEFAULT_DB_ALIAS].settings_dict.get("OPTIONS") or {}
    return options.get("prepare_threshold", _MISSING) == wanted


#: The variables, in the order of the configuration's documentation.
PROJECT_VARIABLES = (
    ProjectVariable("SWITCHYARD_WORKFLOWS", _workflows_carried,
                    "in your project's settings, set those keys in WORKFLOWS = {...} (or have the settings read "
                    "the variable into it)"),
    ProjectVariable("SWITCHYARD_WORKFLOW_MODULES", _modules_carried,
                    "unset the variable, or name the same modules in the setting",
                    why="the setting SWITCHYARD_WORKFLOW_MODULES names other modules, and the setting wins"),
    ProjectVariable("CELERY_QUEUE_TYPE", _queue_type_carried,
                    "in your project's settings, set CELERY_TASK_DEFAULT_QUEUE_TYPE and "
                    "CELERY_TASK_CREATE_MISSING_QUEUE_TYPE to the queue type"),
    ProjectVariable("DATABASE_CONN_MAX_AGE", _conn_max_age_carried,
                    "in your project's settings, set CONN_MAX_AGE in DATABASES['default']", error=False),
    ProjectVariable("DATABASE_PREPARE_THRESHOLD", _prepare_threshold_carried,
                    "in your project's settings, set 'prepare_threshold' in DATABASES['default']['OPTIONS'] "
                    "(None: prepare nothing)", error=False),
    ProjectVariable("SWITCHYARD_LOG_LEVEL", _log_level_carried,
                    "set the level in your project's LOGGING setting", error=False),
)


def ignored(environ=None) -> list[tuple[ProjectVariable, str]]:
    """The variables set in ``environ`` (default: this process's environment) whose value no
    setting of the project carries, each with its value."""
    environ = os.environ if environ is None else environ
    return [(variable, environ[variable.name]) for variable in PROJECT_VARIABLES
            if environ.get(variable.name, "") != "" and not variable.carried(environ[variable.name])]


def message(variable: ProjectVariable, value: str) -> str:
    """One line: the variable, its value, that this project ignores it, and what to do instead."""
    shown = value if len(value) <= 80 else value[:77] + "..."
    return f"{variable.name}={shown} is set in the environment, but {variable.why}: {variable.instead}"
