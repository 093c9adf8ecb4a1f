"""Executions queued behind another of the same ``deployment_id``: when the active
one ends, the oldest queued one goes back to ``pending`` and is started.

Driven by ``execution_status_changed`` (after every terminal transition is committed); the
manager's tick calls :func:`start_next_queued` too, so a start missed by a crash is not lost.
"""

from django.db import transaction
from django.dispatch import receiver

from workflows_app import dispatch
from workflows_app.models import Execution
from workflows_app.signals import execution_status_changed
from workflows_app.states import EXECUTION_ACTIVE, EXECUTION_TERMINAL, ExecutionStatus
from workflows_app.transitions import execution_transition

#: Statuses that hold a deployment: a new execution of it waits (queue) or is refused.
HOLDING = frozenset(EXECUTION_ACTIVE - {ExecutionStatus.QUEUED})


def active_of(deployment_id):
    """The execution that holds ``deployment_id`` now, or None."""
    return (Execution.objects.filter(deployment_id=deployment_id, status__in=HOLDING)
            .order_by("created_at").values_list("pk", flat=True).first())


def start_next_queued(deployment_id):
    """Start the oldest queued execution of ``deployment_id`` if nothing holds it."""
    with transaction.atomic():
        queued = list(Execution.objects.select_for_update(no_key=True)
                      .filter(deployment_id=deployment_id, status=ExecutionStatus.QUEUED).order_by("created_at")[:1])
        if not queued or active_of(deployment_id) is not None:
            return None
        execution = execution_transition(queued[0], ExecutionStatus.PENDING, message="its deployment is free: starting")
        transaction.on_commit(lambda: dispatch.send_advance(execution.pk, execution.workflow_id))
    return execution


def start_every_free_deployment():
    """The tick's safety net: every deployment with queued executions and none holding it."""
    waiting = (Execution.objects.filter(status=ExecutionStatus.QUEUED).exclude(deployment_id=None)
               .values_list("deployment_id", flat=True).distinct())
    for deployment_id in list(waiting):
        start_next_queued(deployment_id)


@receiver(execution_status_changed, dispatch_uid="switchyard-deployment-queue")
def _on_status_changed(sender, execution, source, target, **kwargs):
    if target in EXECUTION_TERMINAL and execution.deployment_id:
        start_next_queued(execution.deployment_id)
