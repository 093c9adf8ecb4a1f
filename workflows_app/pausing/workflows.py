"""Pause and unpause a workflow as a whole, once the service allowed it.

While a workflow is paused (its ``PausedWorkflow`` row exists):

* an execution of it that would start waits ``queued`` instead: the dispatcher's pass that would
  start it (a new start, a deferred one that fell due, a child) queues it
  (:func:`queue_if_paused`), and a queued one is not promoted (``engine.concurrency``). It keeps
  its place in its deployment's queue;
* its schedules' slots that fall due are recorded ``skipped`` (``engine.schedules``).

Its executions already started go on; each can be paused on its own. Unpausing deletes the row
and starts its queued executions, in the order they were created, each as a promotion does (its
concurrency keys must have room); the tick tries again whatever one of them that stayed queued
(:func:`start_unpaused`).
"""

import logging

from django.db.models import Q

from workflows_app.engine import concurrency
from workflows_app.models import Execution, PausedWorkflow
from workflows_app.states import ExecutionStatus
from workflows_app.transitions import execution_transition

logger = logging.getLogger(__name__)

#: Queued executions read per query when a workflow is unpaused.
BATCH = 500


def pause(workflow_id, *, by="") -> tuple[PausedWorkflow, bool]:
    """Pause ``workflow_id``; the row and whether this call paused it (False: it was paused)."""
    return PausedWorkflow.objects.get_or_create(workflow_id=workflow_id, defaults={"paused_by": by})


def unpause(workflow_id) -> int:
    """Unpause ``workflow_id`` (nothing if it was not paused); how many of its queued executions
    started."""
    PausedWorkflow.objects.filter(workflow_id=workflow_id).delete()
    return start_queued(workflow_id)


def queue_if_paused(execution) -> bool:
    """The dispatcher's pass about to start the ``pending`` ``execution``: ``queued`` instead when
    its workflow is paused (whether it was)."""
    if not PausedWorkflow.is_paused(execution.workflow_id):
        return False
    execution_transition(execution, ExecutionStatus.QUEUED, message=f"queued: its workflow {execution.workflow_id} is paused")
    return True


def start_queued(workflow_id) -> int:
    """Start the queued executions of ``workflow_id`` (not paused), in the order they were created,
    each as a promotion does; how many started."""
    started, after = 0, None
    queued = (Execution.objects.filter(workflow_id=workflow_id, status=ExecutionStatus.QUEUED)
              .order_by("created_at", "pk").only(*concurrency.CANDIDATE_FIELDS))
    while True:
        page = queued if after is None else queued.filter(
            Q(created_at__gt=after.created_at) | Q(created_at=after.created_at, pk__gt=after.pk))
        page = list(page[:BATCH])
        started += sum(1 for candidate in page if concurrency.try_start(candidate) is not None)
        if len(page) < BATCH:
            return started
        after = page[-1]


def start_unpaused():
    """The tick's safety net: queued executions of a workflow that is not paused and that no
    concurrency key holds back (a start cut short by a crash of the unpause) are started."""
    paused = PausedWorkflow.objects.values_list("workflow_id", flat=True)
    left = (Execution.objects.filter(status=ExecutionStatus.QUEUED, concurrency_key="", deployment_id=None)
            .exclude(workflow_id__in=paused).order_by().values_list("workflow_id", flat=True).distinct())
    for workflow_id in list(left):
        start_queued(workflow_id)
