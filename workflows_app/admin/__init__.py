"""Django admin, the operators' console: executions (``executions``), operations and
events (``records``), schedules (``schedules``), the workflows paused as a whole
(``paused_workflows``); agents are in ``agents.admin``."""

from workflows_app.admin import executions, paused_workflows, records, schedules  # noqa: F401  (they register the models)
