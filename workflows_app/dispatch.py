"""The only code that sends Celery messages. A message names ids (and an attempt), never state.

Callers run these from ``transaction.on_commit`` so a message never names a row that is not
committed yet.
"""

import logging

from workflows_app.conf import workflows_settings
from workflows_app.errors import TransitionRefused
from workflows_app.models.operation import task_id_for
from workflows_app.states import OperationState

logger = logging.getLogger(__name__)

ADVANCE_TASK = "workflows_app.advance"
RUNNER_TASK = "agents.run_operation"


def _app():
    from switchyard.celery import app

    return app


def send_advance(execution_id):
    """Ask a manager to run the execution's dispatcher (start, wake or finish it)."""
    _app().send_task(ADVANCE_TASK, args=[str(execution_id)], queue=workflows_settings.MANAGEMENT_QUEUE)


def send_operation(operation):
    """Send the current attempt of an operation in ``sending`` to its agent's queue, then
    record it ``sent`` (unless the agent got there first and already started it)."""
    from workflows_app.transitions import operation_transition

    _app().send_task(
        RUNNER_TASK,
        args=[str(operation.id), operation.attempt],
        task_id=task_id_for(operation.id, operation.attempt),
        queue=operation.agent,
    )
    if operation.state == OperationState.SENDING:
        try:
            operation_transition(operation, OperationState.SENT)
        except TransitionRefused:
            pass  # the agent already moved it on (sent -> started), or a cancel ended it
