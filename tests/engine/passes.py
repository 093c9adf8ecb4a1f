"""What the engine's tests share: a pass of the dispatcher in the test process, as a manager
runs one when an advance asks for it, and a step's agent reporting its success."""

from django.utils import timezone

from workflows_app.engine import dispatcher, reports
from workflows_app.models import Execution, Operation
from workflows_app.states import OperationState


def run_pass(execution) -> Execution:
    """One pass over ``execution``; the execution as it is after it."""
    dispatcher.run_pass(execution.pk)
    execution.refresh_from_db()
    return execution


def succeed(execution, name):
    """The step's agent ran it: its result is its first argument (else its name)."""
    operation = Operation.objects.get(execution_id=execution.pk, name=name)
    Operation.objects.filter(pk=operation.pk).update(state=OperationState.STARTED, started_at=timezone.now())
    operation.refresh_from_db()
    assert reports.record_success(operation, operation.attempt, operation.args[0] if operation.args else operation.name)
