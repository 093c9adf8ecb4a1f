"""Resume and force-resume, once the service allowed them: the execution is
``started`` again with a new token, the children its reset steps follow are resumed the same
way, its steps are reset (:func:`reset`), a backoff of its workflow code is skipped, and its
dispatcher is sent once this commits.

Runs in the caller's transaction, under the execution's row lock; a child's row is locked after
its parent's, as a stop locks them (``engine.stopping``).
"""

from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from workflows_app import broker, clock
from workflows_app.engine import failures, grants, progress, stopping
from workflows_app.models import Execution, Operation, OperationDependency
from workflows_app.states import EXECUTION_CHILD_RESUMABLE, OPERATION_AT_AGENT, ExecutionStatus, OperationState, StepKind
from workflows_app.transitions import execution_transition, operation_transition


def resume(execution, action, states) -> Execution:
    """Start ``execution`` again (``action``: "resume" or "force-resume"), resetting its steps in
    ``states`` — and, first, resuming the child of each such step that has one to resume."""
    previous = execution.status
    execution_transition(execution, ExecutionStatus.STARTED, renew_token=True, error="",
                         message=f"{action} requested ({previous} -> started)",
                         data={"action": action, "error": execution.error[:2000]})
    _resume_children(execution, action, states)
    reset(execution, states, f"reset by {action}")
    failures.skip_backoff(execution)
    broker.send_advance_on_commit(execution)
    return execution


def _resume_children(parent, action, states):
    reset = Operation.objects.filter(execution_id=parent.pk, kind=StepKind.WORKFLOW, state__in=states).values("name")
    children = Execution.objects.filter(parent_id=parent.pk, parent_step__in=reset, status__in=EXECUTION_CHILD_RESUMABLE)
    for pk in children.values_list("pk", flat=True):
        child = progress.lock_execution(pk)
        if child.status in EXECUTION_CHILD_RESUMABLE:
            resume(child, f"{action} of its parent", states)


def reset(execution, states, message):
    """Resume's reset: the execution's operations in ``states`` go back to ``pending``
    with ``current_retries = 0`` (a handled failure is forgotten with its failure); the
    dependencies still to succeed are counted again; every pending operation whose dependencies
    have all succeeded is sent. Whatever process of a reset attempt may still run is stopped
    once this commits (its attempt is over: a report from it is stale), so a step never runs
    twice at once.

    An attempt ``sent`` with a grant that runs may start on its agent unasked: its agent is asked
    never to start it, now, and it is reset only once the agent answered (if it started, it is
    stopped as a started one is). One whose agent does not answer is left as it is: its attempt
    is the current one still, and may run."""
    superseded = []
    operations = list(Operation.objects.filter(execution_id=execution.pk, state__in=states))
    answers = grants.stop_now([(op.pk, op.attempt, op.agent) for op in grants.live(operations, clock.now())
                               if op.state in OPERATION_AT_AGENT])
    for operation in operations:
        answer = answers.get((str(operation.pk), operation.attempt))
        if answer is None and operation.state in OPERATION_AT_AGENT \
                and grants.live([operation], clock.now()):
            continue
        if (operation.started_at is not None or answer == "running") and operation.kind == StepKind.OPERATION:
            superseded.append((operation.pk, operation.attempt))
        operation_transition(operation, OperationState.PENDING, message=message, current_retries=0,
                             next_attempt_at=None, error=None, result=None, failure_handled=False)
    unfinished = (OperationDependency.objects.filter(operation_id=OuterRef("pk"))
                  .exclude(depends_on__state=OperationState.SUCCEEDED)
                  .order_by().values("operation_id").annotate(n=Count("pk")).values("n"))
    pending = Operation.objects.filter(execution_id=execution.pk, state=OperationState.PENDING)
    pending.update(pending_dependencies=Coalesce(Subquery(unfinished), 0))
    progress.send_ready(execution, list(pending.filter(pending_dependencies=0)))
    if superseded:
        stopping.stop_attempts(execution.pk, superseded)
