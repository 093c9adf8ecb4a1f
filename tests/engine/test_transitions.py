"""Every pair of statuses and states through the one writer: allowed pairs are applied with
their event, every other pair is refused and changes nothing."""

import itertools
import threading
import time
import uuid

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction

from tests.unit.test_states import SPEC_EXECUTION, SPEC_OPERATION, parse
from workflows_app.engine import stopping
from workflows_app.errors import InvalidTransition, StaleAttempt, StaleToken, TransitionRefused
from workflows_app.models import Event, Execution, Operation
from workflows_app.models.execution import hash_token
from workflows_app.signals import execution_status_changed
from workflows_app.states import (
    OPERATION_EVENT_BY_TARGET,
    EventType,
    ExecutionStatus,
    OperationState,
    execution_event_type,
)
from workflows_app.transitions import create_operation, execution_transition, operation_transition, operations_transition

EXECUTION_ALLOWED = parse(SPEC_EXECUTION)
OPERATION_ALLOWED = parse(SPEC_OPERATION)
EXECUTION_PAIRS = list(itertools.product([s.value for s in ExecutionStatus], repeat=2))
OPERATION_PAIRS = list(itertools.product([s.value for s in OperationState], repeat=2))


def snapshot(model, pk):
    return model.objects.filter(pk=pk).values().get()


@pytest.mark.parametrize("source,target", EXECUTION_PAIRS)
def test_execution_pair(make_execution, source, target):
    execution = make_execution(status=source)
    before = snapshot(Execution, execution.pk)
    if (source, target) in EXECUTION_ALLOWED:
        execution_transition(execution, target)
        assert Execution.objects.get(pk=execution.pk).status == target
        events = list(Event.objects.filter(execution=execution))
        assert [e.type for e in events] == [execution_event_type(ExecutionStatus(source), ExecutionStatus(target))]
        assert events[0].data["from"] == source and events[0].data["to"] == target
    else:
        with pytest.raises(InvalidTransition):
            execution_transition(execution, target)
        assert snapshot(Execution, execution.pk) == before
        assert not Event.objects.filter(execution=execution).exists()


@pytest.mark.parametrize("source,target", OPERATION_PAIRS)
def test_operation_pair(make_operation, source, target):
    operation = make_operation(state=source, attempt=2)
    before = snapshot(Operation, operation.pk)
    if (source, target) in OPERATION_ALLOWED:
        operation_transition(operation, target)
        stored = Operation.objects.get(pk=operation.pk)
        assert stored.state == target
        assert getattr(stored, f"{target}_at") is not None
        assert stored.attempt == (3 if target == "sending" else 2)
        events = list(Event.objects.filter(execution_id=operation.execution_id))
        assert [(e.type, e.operation) for e in events] == [(OPERATION_EVENT_BY_TARGET[OperationState(target)], operation.name)]
    else:
        with pytest.raises(InvalidTransition):
            operation_transition(operation, target)
        assert snapshot(Operation, operation.pk) == before
        assert not Event.objects.filter(execution_id=operation.execution_id).exists()


def test_a_stale_read_changes_nothing(make_execution):
    execution = make_execution(status=ExecutionStatus.STARTED)
    stale = Execution.objects.get(pk=execution.pk)
    execution_transition(execution, ExecutionStatus.COMPLETED)
    with pytest.raises(InvalidTransition) as refused:
        execution_transition(stale, ExecutionStatus.CANCELLING)
    assert refused.value.current == ExecutionStatus.COMPLETED
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.COMPLETED
    assert list(Event.objects.values_list("type", flat=True)) == [EventType.WORKFLOW_COMPLETED]


def test_the_token_is_stored_hashed_and_a_stale_token_changes_nothing(make_execution):
    execution = make_execution(status=ExecutionStatus.PENDING)
    execution_transition(execution, ExecutionStatus.STARTED, renew_token=True)
    first = execution.issued_token
    stored = Execution.objects.get(pk=execution.pk)
    assert first and stored.token_hash == hash_token(first) and first not in str(snapshot(Execution, execution.pk))

    # A resume of the stuck execution issues a new token; the old dispatcher is fenced off.
    execution_transition(stored, ExecutionStatus.STARTED, renew_token=True)
    second = stored.issued_token
    assert second != first
    old_dispatcher = Execution.objects.get(pk=execution.pk)
    with pytest.raises(StaleToken):
        execution_transition(old_dispatcher, ExecutionStatus.COMPLETED, token=first)
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.STARTED
    execution_transition(old_dispatcher, ExecutionStatus.COMPLETED, token=second)
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.COMPLETED


def test_a_report_for_an_older_attempt_changes_nothing(make_operation):
    operation = make_operation(state=OperationState.STARTED, attempt=1)
    old = Operation.objects.get(pk=operation.pk)
    operation_transition(operation, OperationState.RESCHEDULED)
    operation_transition(operation, OperationState.SENDING)
    assert operation.attempt == 2
    with pytest.raises(StaleAttempt):
        operation_transition(operation, OperationState.SENT, attempt=1)
    with pytest.raises(StaleAttempt):  # an instance read before the new attempt began
        operation_transition(old, OperationState.SUCCEEDED)
    assert Operation.objects.get(pk=operation.pk).state == OperationState.SENDING


def test_timestamps_follow_the_execution(make_execution):
    execution = make_execution(status=ExecutionStatus.PENDING)
    execution_transition(execution, ExecutionStatus.STARTED)
    started_at = execution.started_at
    assert started_at is not None and execution.ended_at is None
    execution_transition(execution, ExecutionStatus.FAILED, error="boom")
    stored = Execution.objects.get(pk=execution.pk)
    assert stored.ended_at is not None and stored.error == "boom"
    execution_transition(stored, ExecutionStatus.STARTED)  # resume
    stored = Execution.objects.get(pk=execution.pk)
    assert stored.ended_at is None and stored.started_at == started_at


@pytest.mark.django_db(transaction=True)
def test_the_signal_is_sent_after_commit_and_a_failing_receiver_is_recorded(make_execution):
    seen = []

    def receiver(sender, execution, source, target, event, **kwargs):
        seen.append((source, target, event.type))

    def broken(sender, **kwargs):
        raise RuntimeError("listener broke")

    execution_status_changed.connect(receiver)
    execution_status_changed.connect(broken)
    try:
        execution = make_execution(status=ExecutionStatus.STARTED)
        with transaction.atomic():
            execution_transition(execution, ExecutionStatus.COMPLETED)
            assert seen == []  # nothing is announced before the change is committed
        assert seen == [(ExecutionStatus.STARTED, ExecutionStatus.COMPLETED, EventType.WORKFLOW_COMPLETED)]
        failures = Event.objects.filter(execution=execution, type=EventType.LISTENER_FAILED)
        assert [e.message for e in failures] == [f"{broken.__qualname__} raised RuntimeError: listener broke"]
        assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.COMPLETED
    finally:
        execution_status_changed.disconnect(receiver)
        execution_status_changed.disconnect(broken)


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transition_leaves_neither_status_nor_event(make_execution):
    execution = make_execution(status=ExecutionStatus.STARTED)
    with pytest.raises(ZeroDivisionError):
        with transaction.atomic():
            execution_transition(execution, ExecutionStatus.COMPLETED)
            1 / 0
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.STARTED
    assert not Event.objects.exists()


def test_many_operations_move_at_once_with_one_event_each_and_a_refused_one_is_left_out(make_execution, make_operation):
    execution = make_execution()
    ops = [make_operation(execution=execution) for _ in range(4)]
    raced = Operation.objects.get(pk=ops[2].pk)
    operation_transition(raced, OperationState.SENDING)  # another writer got there first
    before = Event.objects.count()

    moved = operations_transition(ops, OperationState.SENDING)

    assert [op.pk for op in moved] == [ops[0].pk, ops[1].pk, ops[3].pk]
    for op in moved:
        stored = Operation.objects.get(pk=op.pk)
        assert (stored.state, stored.attempt, op.state, op.attempt) == ("sending", 1, "sending", 1)
        assert stored.sending_at is not None
    assert Operation.objects.get(pk=ops[2].pk).attempt == 1, "the raced one was not sent twice"
    events = list(Event.objects.order_by("id")[before:])
    assert sorted((e.operation, e.type, e.data["attempt"]) for e in events) == sorted(
        (op.name, EventType.TASK_SENDING, 1) for op in moved)


def test_many_operations_refuse_a_move_the_table_does_not_allow_and_write_nothing(make_operation):
    ops = [make_operation(), make_operation(state=OperationState.SUCCEEDED)]
    before = Event.objects.count()
    with pytest.raises(InvalidTransition):
        operations_transition(ops, OperationState.SENDING)
    assert [Operation.objects.get(pk=op.pk).state for op in ops] == ["pending", "succeeded"]
    assert Event.objects.count() == before


def beside_the_intake(pks, work):
    """``work()`` while another writer locks as the managers' intake locks a batch (execution,
    then operation): the first row, then — once ``work`` locked what it could — the last. Returns
    what ``work`` returned (None if the database aborted it) and the aborts of either writer."""
    holding, errors = threading.Event(), []

    def intake():
        try:
            with transaction.atomic():
                Operation.objects.select_for_update(no_key=True).get(pk=min(pks))
                holding.set()
                time.sleep(0.5)
                Operation.objects.select_for_update(no_key=True).get(pk=max(pks))
        except OperationalError as exc:
            errors.append(exc)
        finally:
            connection.close()

    writer = threading.Thread(target=intake)
    writer.start()
    assert holding.wait(10)
    result = None
    try:
        result = work()
    except OperationalError as exc:
        errors.append(exc)
    writer.join(30)
    return result, errors


def stored_last_key_first(make_execution, make_operation, state):
    """60 operations of one execution whose keys go down as they were stored: the table's order
    (pending_at, id) is the reverse of the intake's."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks: on SQLite a writer takes the whole database's lock")
    execution = make_execution(status=ExecutionStatus.STARTED)
    pks = sorted((uuid.uuid4() for _ in range(60)), reverse=True)
    return execution, [make_operation(state, execution, pk=pk, name=f"n{i:02}", attempt=1, agent="host-1")
                       for i, pk in enumerate(pks)]


@pytest.mark.django_db(transaction=True)
def test_many_operations_are_locked_in_the_order_every_writer_takes_so_that_two_never_deadlock(make_execution,
                                                                                                 make_operation):
    """The intake locks its batch's rows by execution, then operation; a pass recording a batch of
    its sends ``sent`` locks them in that order too. It locked them in the order the table held
    them: with the intake holding the first row and waiting for the last, which the pass held,
    PostgreSQL ended one of the two with "deadlock detected" (and a fan-out's later sends waited
    for the tick: 46 s for 1,000 no-ops instead of 5)."""
    execution, ops = stored_last_key_first(make_execution, make_operation, OperationState.SENDING)
    moved, errors = beside_the_intake([op.pk for op in ops], lambda: operations_transition(ops, OperationState.SENT))
    assert errors == [], "no writer was aborted"
    assert len(moved) == 60 and set(Operation.objects.values_list("state", flat=True)) == {"sent"}


@pytest.mark.django_db(transaction=True)
def test_a_cancel_of_many_operations_locks_them_in_that_order_too(make_execution, make_operation):
    """A cancel moves its operations one by one, in the execution's order (their events read in
    step order), inside the pass's transaction: it locks them all first, in the intake's order.
    Locked one by one as they were cancelled, a cancel of a large fan-out and the intake storing
    its reports could each wait for the other."""
    execution, ops = stored_last_key_first(make_execution, make_operation, OperationState.PENDING)
    def cancel_in_one_transaction():
        with transaction.atomic():
            return stopping.cancel_in_states(execution, [OperationState.PENDING], "cancelled: test")

    cancelled, errors = beside_the_intake([op.pk for op in ops], cancel_in_one_transaction)
    assert errors == [], "no writer was aborted"
    assert len(cancelled) == 60 and set(Operation.objects.values_list("state", flat=True)) == {"cancelled"}
    cancels = Event.objects.filter(execution=execution, type=EventType.TASK_CANCELLED).order_by("pk")
    assert [event.operation for event in cancels] == [f"n{i:02}" for i in range(60)], "in step order"


def test_a_refused_transition_inside_a_transaction_leaves_that_transaction_usable(make_operation):
    """No savepoint: the refusal is raised before anything is written, so the caller may go on."""
    op = make_operation()
    stale = Operation.objects.get(pk=op.pk)
    operation_transition(op, OperationState.SENDING)
    with transaction.atomic():
        with pytest.raises(TransitionRefused):
            operation_transition(stale, OperationState.SENDING)
        operation_transition(op, OperationState.SENT)  # the same transaction still works
    assert Operation.objects.get(pk=op.pk).state == "sent"


def test_a_new_step_is_stored_already_sending_with_the_event_of_that_move(make_execution):
    """``create_operation``: what storing a step and moving it from pending would write."""
    execution = make_execution(status=ExecutionStatus.STARTED)
    operation = Operation(execution=execution, name="first", operation="noop", agent="a1")

    create_operation(operation, OperationState.SENDING)

    stored = Operation.objects.get(pk=operation.pk)
    assert (stored.state, stored.attempt, operation.state, operation.attempt) == ("sending", 1, "sending", 1)
    assert stored.pending_at is not None and stored.sending_at is not None
    events = list(Event.objects.filter(execution=execution))
    assert [(e.type, e.operation, e.data) for e in events] == [
        (EventType.TASK_SENDING, "first", {"from": "pending", "to": "sending", "attempt": 1})]
    operation_transition(operation, OperationState.SENT)  # it goes on from there like any other
    assert Operation.objects.get(pk=operation.pk).state == "sent"


def test_a_new_step_is_stored_with_its_event_or_not_at_all(make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.STARTED)
    make_operation(execution=execution, name="taken")
    before = Event.objects.count()
    with pytest.raises(InvalidTransition):  # not a move from pending
        create_operation(Operation(execution=execution, name="other", operation="noop", agent="a1"), OperationState.SUCCEEDED)
    with pytest.raises(IntegrityError), transaction.atomic():  # the name is its execution's already
        create_operation(Operation(execution=execution, name="taken", operation="noop", agent="a1"), OperationState.SENDING)
    assert list(Operation.objects.filter(execution=execution).values_list("name", flat=True)) == ["taken"]
    assert Event.objects.count() == before
