"""Resume and force-resume, once the service allowed them: the execution is
``started`` again with a new token, the children its reset steps follow are resumed the same
way, its steps are reset (``steps.reset``), a backoff of its workflow code is skipped, and its
dispatcher is sent once this commits.

Runs in the caller's transaction, under the execution's row lock; a child's row is locked after
its parent's, as a stop locks them (``engine.stopping``).
"""

from django.db import transaction

from workflows_app import dispatch
from workflows_app.engine import failures, progress, steps
from workflows_app.models import Execution, Operation
from workflows_app.states import ExecutionStatus, StepKind
from workflows_app.transitions import execution_transition

#: A child its parent's resume resumes: one that failed or was cancelled. One that completed has
#: a succeeded step, never reset; one that timed out cannot be resumed, so its step fails again.
CHILD_RESUMABLE = (ExecutionStatus.FAILED, ExecutionStatus.CANCELLED)


def resume(execution, action, states) -> Execution:
    """Start ``execution`` again (``action``: "resume" or "force-resume"), resetting its steps in
    ``states`` — and, first, resuming the child of each such step that has one to resume."""
    previous = execution.status
    execution_transition(execution, ExecutionStatus.STARTED, renew_token=True, error="",
                         message=f"{action} requested ({previous} -> started)",
                         data={"action": action, "error": execution.error[:2000]})
    _resume_children(execution, action, states)
    steps.reset(execution, states, f"reset by {action}")
    failures.skip_backoff(execution)
    transaction.on_commit(lambda: dispatch.send_advance(execution.pk, execution.workflow_id))
    return execution


def _resume_children(parent, action, states):
    reset = Operation.objects.filter(execution_id=parent.pk, kind=StepKind.WORKFLOW, state__in=states).values("name")
    children = Execution.objects.filter(parent_id=parent.pk, parent_step__in=reset, status__in=CHILD_RESUMABLE)
    for pk in children.values_list("pk", flat=True):
        child = progress.lock_execution(pk)
        if child.status in CHILD_RESUMABLE:
            resume(child, f"{action} of its parent", states)
