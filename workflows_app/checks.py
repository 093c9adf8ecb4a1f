"""System checks of the WORKFLOWS settings.

* ``workflows.E001``: ``WORKFLOWS`` has a key that is not a setting (or is not a dict).
* ``workflows.E002``: a ``WORKFLOWS`` value that cannot work.
* ``workflows.E003``: the project has no Celery app for Switchyard to use.
"""

from django.conf import settings
from django.core.checks import Error, register

from workflows_app import conf, dispatch

_HINT = "See workflows_app.conf.DEFAULTS for the keys and their meaning."


@register()
def check_workflows_settings(app_configs=None, **kwargs):
    user = getattr(settings, "WORKFLOWS", None) or {}
    return [Error(problem, hint=_HINT, id="workflows.E001") for problem in conf.unknown_keys(user)] + [
        Error(problem, hint=_HINT, id="workflows.E002") for problem in conf.bad_values(user)
    ]


@register()
def check_celery_app(app_configs=None, **kwargs):
    if dispatch.project_app() is not None:
        return []
    return [Error("the project has no Celery app: Switchyard sends every message through the project's own",
                  hint="Define it in <project>/celery.py and import it in <project>/__init__.py, as Celery's "
                       "'First steps with Django' shows.", id="workflows.E003")]
