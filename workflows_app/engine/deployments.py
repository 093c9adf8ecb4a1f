"""Executions queued behind another of the same ``deployment_id``: when the active
one ends, the oldest queued one goes back to ``pending`` and is started.

Driven by the engine's reactions (``engine.reactions``: after every committed terminal
transition, :func:`start_next_when_ended`); the manager's tick calls
:func:`start_every_free_deployment` too, so a start missed by a crash is not lost.
"""

from django.db import transaction

from workflows_app import broker
from workflows_app.models import Execution
from workflows_app.states import EXECUTION_HOLDING_DEPLOYMENT, EXECUTION_TERMINAL, ExecutionStatus
from workflows_app.transitions import execution_transition


def active_of(deployment_id):
    """The execution that holds ``deployment_id`` now, or None."""
    return (Execution.objects.filter(deployment_id=deployment_id, status__in=EXECUTION_HOLDING_DEPLOYMENT)
            .order_by("created_at").values_list("pk", flat=True).first())


def start_next_queued(deployment_id):
    """Start the oldest queued execution of ``deployment_id`` if nothing holds it."""
    with transaction.atomic():
        queued = list(Execution.objects.select_for_update(no_key=True)
                      .filter(deployment_id=deployment_id, status=ExecutionStatus.QUEUED).order_by("created_at")[:1])
        if not queued or active_of(deployment_id) is not None:
            return None
        execution = execution_transition(queued[0], ExecutionStatus.PENDING, message="its deployment is free: starting")
        broker.send_advance_on_commit(execution)
    return execution


def start_every_free_deployment():
    """The tick's safety net: every deployment with queued executions and none holding it."""
    waiting = (Execution.objects.filter(status=ExecutionStatus.QUEUED).exclude(deployment_id=None)
               .values_list("deployment_id", flat=True).distinct())
    for deployment_id in list(waiting):
        start_next_queued(deployment_id)


def start_next_when_ended(execution, source, target, event):
    """A reaction: an execution that ended frees its deployment for the oldest queued one."""
    if target in EXECUTION_TERMINAL and execution.deployment_id:
        start_next_queued(execution.deployment_id)
