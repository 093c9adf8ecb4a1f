"""When a completion wakes the workflow of a graph (``reports.record_success``): it must wake it
whenever nothing can move the graph any more, and may leave it asleep only when something
still will. On the database; the wake-up messages are recorded instead of sent."""

import pytest

from workflows_app import broker
from workflows_app.engine import progress, reports
from workflows_app.models import OperationDependency
from workflows_app.states import FailureMode, OperationState


@pytest.fixture
def woken(monkeypatch):
    sent = []
    monkeypatch.setattr(broker, "send_advance", lambda pk, workflow_id=None: sent.append(str(pk)))
    monkeypatch.setattr(progress, "publish", lambda ops: None)  # sent: not one message, no write of it
    return sent


def fan_in(make_execution, make_operation, mode, other_state):
    """Members ``m1`` (in ``other_state``) and ``m2`` (started) and ``join`` after both; graph
    steps (not awaited by the workflow function)."""
    execution = make_execution(failure_mode=mode)
    m1 = make_operation(other_state, execution, name="m1", attempt=1, awaited=False)
    m2 = make_operation(OperationState.STARTED, execution, name="m2", attempt=1, awaited=False)
    remaining = 1 if other_state != OperationState.SUCCEEDED else 0
    join = make_operation(OperationState.PENDING, execution, name="join", awaited=False, pending_dependencies=remaining + 1)
    OperationDependency.objects.bulk_create([OperationDependency(operation=join, depends_on=m1),
                                             OperationDependency(operation=join, depends_on=m2)])
    return execution, m2


def test_a_member_whose_join_still_waits_for_a_running_one_does_not_wake_the_workflow(
        make_execution, make_operation, woken, django_capture_on_commit_callbacks):
    execution, m2 = fan_in(make_execution, make_operation, FailureMode.NO_NEW_CALLS, OperationState.STARTED)
    with django_capture_on_commit_callbacks(execute=True):
        assert reports.record_success(m2, 1, "r2")
    assert woken == []


def test_in_continue_while_possible_a_join_that_waits_for_a_failed_member_wakes_the_workflow(
        make_execution, make_operation, woken, django_capture_on_commit_callbacks):
    """The failed member never counts down: the join waits for good, and nothing else is in
    flight: the last completion must wake the workflow, or the execution hangs."""
    execution, m2 = fan_in(make_execution, make_operation, FailureMode.CONTINUE_WHILE_POSSIBLE, OperationState.FAILED)
    with django_capture_on_commit_callbacks(execute=True):
        assert reports.record_success(m2, 1, "r2")
    assert woken == [str(execution.pk)]


def test_the_last_member_sends_the_join_and_does_not_wake_the_workflow(
        make_execution, make_operation, woken, django_capture_on_commit_callbacks):
    execution, m2 = fan_in(make_execution, make_operation, FailureMode.NO_NEW_CALLS, OperationState.SUCCEEDED)
    with django_capture_on_commit_callbacks(execute=True):
        assert reports.record_success(m2, 1, "r2")
    join = execution.operations.get(name="join")
    assert (join.state, join.pending_dependencies) == (OperationState.SENDING, 0)
    assert woken == []


def test_a_leaf_that_ends_the_graph_wakes_the_workflow(make_execution, make_operation, woken,
                                                      django_capture_on_commit_callbacks):
    execution = make_execution()
    make_operation(OperationState.SUCCEEDED, execution, name="a", attempt=1, awaited=False)
    last = make_operation(OperationState.STARTED, execution, name="b", attempt=1, awaited=False)
    with django_capture_on_commit_callbacks(execute=True):
        assert reports.record_success(last, 1, None)
    assert woken == [str(execution.pk)]


@pytest.mark.parametrize("mode, sent", [(FailureMode.NO_NEW_CALLS, False), (FailureMode.FAIL_FAST, False),
                                        (FailureMode.CONTINUE_WHILE_POSSIBLE, True)])
def test_a_step_made_ready_after_another_failed_is_sent_only_in_continue_while_possible(
        make_execution, make_operation, woken, django_capture_on_commit_callbacks, mode, sent):
    """``a`` -> ``b``, while ``other`` has failed: ``a``'s success makes ``b`` ready, and ``b`` is
    a new call. The countdown reads the failure in the same statement."""
    execution = make_execution(failure_mode=mode)
    make_operation(OperationState.FAILED, execution, name="other", attempt=1, awaited=False)
    a = make_operation(OperationState.STARTED, execution, name="a", attempt=1, awaited=False)
    b = make_operation(OperationState.PENDING, execution, name="b", awaited=False, pending_dependencies=1)
    OperationDependency.objects.create(operation=b, depends_on=a)
    with django_capture_on_commit_callbacks(execute=True):
        assert reports.record_success(a, 1, None)
    b.refresh_from_db()
    assert (b.state, b.pending_dependencies) == (OperationState.SENDING if sent else OperationState.PENDING, 0)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_completion_waits_for_a_writer_of_its_execution_and_counts_down_the_step_it_stored(
        make_execution, make_operation, woken):
    """A dispatcher holds the execution's row while it stores ``y`` after ``x``; ``x`` completes
    meanwhile. The completion must wait for that commit and then count ``y`` down (and send it):
    counted in a snapshot from before the commit, ``y`` would wait for ``x`` for ever."""
    import threading
    import time

    from django.db import connection, transaction

    from workflows_app.models import Execution, Operation

    execution = make_execution()
    x = make_operation(OperationState.STARTED, execution, name="x", attempt=1, awaited=False)
    holding, committed = threading.Event(), []

    def dispatcher():
        try:
            with transaction.atomic():
                Execution.objects.select_for_update(no_key=True).get(pk=execution.pk)
                y = Operation.objects.create(execution=execution, name="y", operation="noop", agent="a",
                                             awaited=False, pending_dependencies=1)
                OperationDependency.objects.create(operation=y, depends_on=x)
                holding.set()
                time.sleep(0.5)  # the completion starts meanwhile, and must wait
                committed.append(time.monotonic())
        finally:
            connection.close()

    writer = threading.Thread(target=dispatcher)
    writer.start()
    assert holding.wait(10)
    assert reports.record_success(x, 1, "done")
    returned = time.monotonic()
    writer.join(10)
    assert committed and returned >= committed[0], "the completion did not wait for the writer"
    y = Operation.objects.get(execution=execution, name="y")
    assert (y.state, y.pending_dependencies) == (OperationState.SENDING, 0)
    assert woken == []
