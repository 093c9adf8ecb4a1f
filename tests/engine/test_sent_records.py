"""A pass sends its operations in batches, recording each batch ``sent`` once its messages left:
a record the database aborted (a deadlock with the intake storing those operations' reports) is
made again, and the later batches are sent; any other database error goes up as before (what
stays ``sending`` is sent again by the tick)."""

import pytest
from django.db import OperationalError

from workflows_app.engine import progress
from workflows_app.models import Operation
from workflows_app.states import ExecutionStatus, OperationState


class Aborted(Exception):
    sqlstate = "40P01"  # PostgreSQL's "deadlock detected"


@pytest.fixture
def batches(make_execution, make_operation, outbox):
    execution = make_execution(status=ExecutionStatus.STARTED)
    return [make_operation(OperationState.SENDING, execution, name=f"n{i:03}", agent="management", attempt=1)
            for i in range(progress.SENT_BATCH + 5)]


def _failing_once(monkeypatch, error):
    real, failed = progress.operations_transition, []

    def transition(operations, target, **options):
        if not failed:
            failed.append(len(operations))
            raise error
        return real(operations, target, **options)

    monkeypatch.setattr(progress, "operations_transition", transition)
    return failed


def test_a_sent_record_the_database_aborted_is_made_again_and_the_later_batches_go(batches, outbox, monkeypatch):
    error = OperationalError("deadlock detected")
    error.__cause__ = Aborted()
    failed = _failing_once(monkeypatch, error)
    progress.publish(batches)
    assert failed == [progress.SENT_BATCH]
    assert sorted(outbox["operation"]) == sorted(op.name for op in batches), "every batch was sent"
    assert set(Operation.objects.values_list("state", flat=True)) == {OperationState.SENT}


def test_another_database_error_goes_up(batches, outbox, monkeypatch):
    _failing_once(monkeypatch, OperationalError("server closed the connection unexpectedly"))
    with pytest.raises(OperationalError):
        progress.publish(batches)
    assert len(outbox["operation"]) == progress.SENT_BATCH, "the later batches wait for the tick"
    assert Operation.objects.filter(state=OperationState.SENDING).count() == len(batches)
