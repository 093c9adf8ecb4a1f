"""Django admin, the operators' console: executions (``executions``), operations and
events (``records``), schedules (``schedules``); agents are in ``agents.admin``."""

from workflows_app.admin import executions, records, schedules  # noqa: F401  (they register the models)
