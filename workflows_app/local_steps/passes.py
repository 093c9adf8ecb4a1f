"""The pass' side of local steps: which one it starts next, running it, and recording what it did.

``engine.dispatcher.run_pass`` loops: each turn is one transaction under the execution's row lock
that records the local step the last turn ran (:func:`record`), runs the pass, and starts the next
local step (:func:`start_next`); then, with that committed and no lock held, it runs that step
(:func:`run`). One commit a step.
"""

from django.db import connection

from workflows_app.engine import grants, reports
from workflows_app.errors import TransitionRefused
from workflows_app.local_steps import due, host, running
from workflows_app.models import Operation
from workflows_app.states import ExecutionStatus, OperationState
from workflows_app.transitions import operation_transition

#: How long past its timeout the tick waits before it fails a local step that is still started:
#: its own pass interrupts it at its timeout and records that at once, unless the pass is gone.
OVERDUE_GRACE_SECONDS = 5


def waiting_sql(execution_id) -> str:
    """An SQL expression, true when the execution whose id is the column ``execution_id`` has a
    local step ``sent`` (made ready and waiting for a pass). The dispatcher's lock asks it: an
    execution without one pays one probe of the execution-and-state index."""
    q = connection.ops.quote_name
    op = Operation._meta
    column = {name: q(op.get_field(name).column) for name in ("execution", "state", "local")}
    return (f"EXISTS (SELECT 1 FROM {q(op.db_table)} WHERE {column['execution']} = {execution_id} "
            f"AND {column['state']} = '{OperationState.SENT.value}' AND {column['local']})")


def start_next(execution, waiting):
    """Under the execution's lock, at the end of its pass: the next local step of the execution
    waiting to run, moved to ``started`` (``None`` when there is none, or the execution is not
    running). ``waiting``: the lock's reading of :func:`waiting_sql`; the steps the pass itself made
    ready are noted (``due.note``)."""
    noted = due.take_noted()
    if not (noted or waiting) or execution.status != ExecutionStatus.STARTED:
        return None
    # One the pass stored started already (``engine.progress.store``) runs first.
    ready = next((op for op in noted if op.state == OperationState.STARTED), None)
    if ready is not None:
        due.note([op for op in noted if op is not ready])  # the next turn's lock reads them again anyway
        ready.execution = execution
        return ready
    # Those the pass made ready are as it left them; others waited before it: read them all.
    for operation in _waiting(execution) if waiting else noted:
        fields, data = host.started()
        try:
            operation_transition(operation, OperationState.STARTED, attempt=operation.attempt, data=data, **fields)
        except TransitionRefused:
            continue
        operation.execution = execution
        return operation
    return None


def _waiting(execution):
    return (Operation.objects.filter(execution_id=execution.pk, local=True, state=OperationState.SENT)
            .order_by("sent_at", "name"))


def run(operation):
    """Run the step :func:`start_next` started, with no transaction open; ``(operation, outcome)``."""
    return operation, running.run(operation, dry_run=operation.execution.is_dry_run, args=grants.call_args(operation))


def record(finished):
    """Under the execution's lock, at the start of the next turn: what the step did, recorded as
    an agent's report is; the same pass goes on, so nothing wakes the execution for it."""
    operation, outcome = finished
    with due.recording():
        reports.record_outcome(operation, operation.attempt, outcome)
    # Its row is as this transaction left it: the pass' run need not read it again.
    due.recorded(operation)
