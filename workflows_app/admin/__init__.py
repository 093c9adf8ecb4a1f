"""Django admin, the operators' console: executions (``executions``), operations and
events (``records``); agents are in ``agents.admin``."""

from workflows_app.admin import executions, records  # noqa: F401  (they register the models)
