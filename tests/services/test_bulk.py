"""``workflows_app.bulk.run.act``: one action on many executions, each through its one-at-a-time
service and permission check, in batches, with the count of what was done, skipped and refused;
and the dry run that counts without doing. The API, admin and commands that call it:
tests/api/test_bulk.py, tests/admin/test_bulk_actions.py, tests/commands/test_bulk_commands.py."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from kombu.exceptions import OperationalError as BrokerError

from tests.api.conftest import FORCER, OPERATOR, make_user, register_guarded
from workflows_app import services
from workflows_app.bulk import run
from workflows_app.errors import ParameterError, PermissionRefused
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import ExecutionStatus, OperationState
from workflows_app.transitions import execution_transition

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy(make_execution, make_operation):
    """``make(n)``: n started executions of workflow ``bulk``, each with a step running."""

    def make(n, workflow_id="bulk"):
        made = []
        for _ in range(n):
            execution = make_execution(status=ExecutionStatus.STARTED, workflow_id=workflow_id)
            make_operation(OperationState.STARTED, execution, name="busy", attempt=1)
            made.append(execution)
        return made

    return make


def statuses(executions) -> list:
    return [Execution.objects.get(pk=e.pk).status for e in executions]


def test_each_one_is_done_or_skipped_by_its_status_and_all_are_counted(busy, make_execution, outbox):
    started = busy(3)
    pending = make_execution(status=ExecutionStatus.PENDING, workflow_id="bulk")
    ended = [make_execution(status=status, workflow_id="bulk")
             for status in (ExecutionStatus.COMPLETED, ExecutionStatus.COMPLETED, ExecutionStatus.FAILED)]
    other = busy(1, workflow_id="another")[0]

    outcome = run.act("cancel", Execution.objects.filter(workflow_id="bulk"))

    assert outcome.as_dict() == {
        "action": "cancel", "dry_run": False, "matched": 7, "done": 4,
        "skipped": {"count": 3, "statuses": {"completed": 2, "failed": 1}},
        "refused": {"count": 0, "permission": 0, "status": {}, "gone": 0}, "stopped": None}
    assert statuses(started) == ["cancelling"] * 3, "each through the cancel service: its step is awaited"
    assert statuses([pending]) == ["cancelled"]
    assert statuses(ended) == ["completed", "completed", "failed"]
    assert statuses([other]) == ["started"], "not selected"
    assert outcome.summary() == "cancel: 4 done, 3 skipped (completed 2, failed 1), 0 refused, of 7 matching"


def test_a_dry_run_counts_what_the_run_then_does_and_changes_nothing(busy, make_execution, outbox):
    busy(2)
    make_execution(status=ExecutionStatus.CANCELLED, workflow_id="bulk")
    selection = Execution.objects.filter(workflow_id="bulk")
    events = Event.objects.count()

    dry = run.act("cancel", selection, dry_run=True)

    assert (dry.dry_run, dry.matched, dry.done, dict(dry.skipped)) == (True, 3, 2, {"cancelled": 1})
    assert sorted(selection.values_list("status", flat=True)) == ["cancelled", "started", "started"]
    assert Event.objects.count() == events, "nothing recorded"
    assert dry.summary().startswith("cancel (dry run): 2 would be done, 1 skipped")
    real = run.act("cancel", selection)
    assert (real.matched, real.done, dict(real.skipped)) == (dry.matched, dry.done, dict(dry.skipped))


def test_a_batch_smaller_than_the_selection_still_acts_on_all_one_query_a_batch(monkeypatch, busy, outbox):
    """Five started executions, two a batch, filtered by status=started: each cancel moves one
    out of the filter while the run goes on, which would make pages by offset skip some."""
    executions = busy(5)
    selection = Execution.objects.filter(workflow_id="bulk", status=ExecutionStatus.STARTED)
    reads = []
    real = run.batches

    def counted(queryset, size):
        for batch in real(queryset, size):
            reads.append(len(batch))
            yield batch

    monkeypatch.setattr(run, "batches", counted)
    outcome = run.act("cancel", selection, batch_size=2)
    assert outcome.done == 5 and statuses(executions) == ["cancelling"] * 5
    assert reads == [2, 2, 1]
    with CaptureQueriesContext(connection) as queries:
        assert [len(batch) for batch in real(Execution.objects.filter(workflow_id="bulk"), 2)] == [2, 2, 1]
    assert len(queries) == 3, "one query per batch, however many rows it has"


def test_permission_refusals_are_counted_and_the_rest_is_done(monkeypatch, busy, outbox):
    """An operator who may cancel, but not on the workflow that has a permission of its own."""
    guarded = register_guarded(monkeypatch)
    mine = busy(2)
    theirs = busy(1, workflow_id=guarded)
    operator = make_user("op", OPERATOR)
    selection = Execution.objects.filter(pk__in=[e.pk for e in mine + theirs])

    dry = run.act("cancel", selection, user=operator, dry_run=True)
    outcome = run.act("cancel", selection, user=operator)

    assert (dry.done, dry.refused_permission) == (outcome.done, outcome.refused_permission) == (2, 1)
    assert outcome.as_dict()["refused"] == {"count": 1, "permission": 1, "status": {}, "gone": 0}
    assert statuses(mine) == ["cancelling"] * 2 and statuses(theirs) == ["started"]
    assert "1 refused (permission 1)" in outcome.summary()


def test_a_user_who_may_take_the_action_on_nothing_is_refused_the_whole_of_it(busy, outbox):
    executions = busy(2)
    operator = make_user("op", OPERATOR)  # change_execution, not force_execution
    with pytest.raises(PermissionRefused, match="force_execution"):
        run.act("kill", Execution.objects.filter(workflow_id="bulk"), user=operator)
    assert statuses(executions) == ["started"] * 2
    forcer = make_user("forcer", FORCER)
    assert run.act("kill", Execution.objects.filter(workflow_id="bulk"), user=forcer).done == 2


def test_a_status_changed_or_an_execution_deleted_meanwhile_is_refused_with_why(monkeypatch, busy, outbox):
    """Read started in one batch; before its turn, one completes and one is deleted."""
    first, second, third = sorted(busy(3), key=lambda e: e.pk)
    cancel = services.ACTIONS["cancel"]

    def cancel_while_others_move(pk, *, user=None):
        if pk == first.pk:
            execution_transition(Execution.objects.get(pk=second.pk), ExecutionStatus.COMPLETED)
            Execution.objects.filter(pk=third.pk).delete()
        return cancel(pk, user=user)

    monkeypatch.setitem(services.ACTIONS, "cancel", cancel_while_others_move)
    outcome = run.act("cancel", Execution.objects.filter(workflow_id="bulk"))
    assert outcome.as_dict()["refused"] == {"count": 2, "permission": 0, "status": {"completed": 1}, "gone": 1}
    assert (outcome.done, outcome.matched) == (1, 3)


def test_a_broker_that_does_not_answer_stops_the_run_where_it_is(monkeypatch, busy, outbox):
    executions = sorted(busy(3), key=lambda e: e.pk)
    cancel = services.ACTIONS["cancel"]

    def cancel_until_the_broker_goes(pk, *, user=None):
        if pk == executions[1].pk:
            raise BrokerError("Error 111 connecting to localhost:6379. Connection refused.")
        return cancel(pk, user=user)

    monkeypatch.setitem(services.ACTIONS, "cancel", cancel_until_the_broker_goes)
    outcome = run.act("cancel", Execution.objects.filter(workflow_id="bulk"))
    assert outcome.done == 1 and outcome.matched == 1
    assert "the message broker did not answer (Error 111" in outcome.stopped and str(executions[1].pk) in outcome.stopped
    assert statuses(executions) == ["cancelling", "started", "started"], "the third was not reached"
    assert outcome.as_dict()["stopped"] == outcome.stopped


def test_any_action_of_the_services_is_taken_so(busy, make_execution, outbox):
    """Nothing here lists actions: resume and pause work as cancel does."""
    failed = make_execution(status=ExecutionStatus.FAILED, workflow_id="bulk")
    started = busy(1)
    resumed = run.act("resume", Execution.objects.filter(workflow_id="bulk"))
    assert (resumed.done, dict(resumed.skipped)) == (2, {}), "a started execution may be resumed (a stuck one)"
    assert statuses([failed]) == ["started"]
    paused = run.act("pause", Execution.objects.filter(pk=started[0].pk))
    assert paused.done == 1 and statuses(started) == ["paused"]


def test_an_unknown_action_or_batch_size_is_refused():
    with pytest.raises(ParameterError, match="unknown action 'explode': one of cancel"):
        run.act("explode", Execution.objects.none())
    with pytest.raises(ValueError, match="batch_size and workers must be 1 or more"):
        run.act("cancel", Execution.objects.none(), batch_size=0)


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_several_are_acted_on_at_once_each_committed_on_its_own(monkeypatch, busy, outbox):
    """Threads, each on a connection of its own: they see only what is committed (so inside a
    transaction, as every other test here, ``act`` takes them one at a time)."""
    executions = busy(9)
    cancel = services.ACTIONS["cancel"]
    threads = set()

    def cancel_noting_the_thread(pk, *, user=None):
        import threading

        threads.add(threading.current_thread().name)
        return cancel(pk, user=user)

    monkeypatch.setitem(services.ACTIONS, "cancel", cancel_noting_the_thread)
    outcome = run.act("cancel", Execution.objects.filter(workflow_id="bulk"), batch_size=2, workers=3)
    assert (outcome.done, outcome.matched) == (9, 9) and statuses(executions) == ["cancelling"] * 9
    assert len(threads) > 1 and all(name.startswith("switchyard-bulk-") for name in threads)


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_broker_error_stops_the_threads_and_another_error_is_raised(monkeypatch, busy, outbox):
    busy(12)

    def broker_gone(pk, *, user=None):
        raise BrokerError("Connection refused.")

    monkeypatch.setitem(services.ACTIONS, "cancel", broker_gone)
    outcome = run.act("cancel", Execution.objects.filter(workflow_id="bulk"), batch_size=2, workers=3)
    assert outcome.stopped.startswith("the message broker did not answer (Connection refused.)")
    assert outcome.done == 0 and outcome.matched == 0, "the ones stopped are not counted"

    def bug(pk, *, user=None):
        raise RuntimeError("a bug")

    monkeypatch.setitem(services.ACTIONS, "cancel", bug)
    with pytest.raises(RuntimeError, match="a bug"):
        run.act("cancel", Execution.objects.filter(workflow_id="bulk"), batch_size=2, workers=3)


@pytest.fixture
def broadcasts(monkeypatch):
    """The cancel broadcasts sent to the broker, recorded instead: the attempts each one names."""
    from workflows_app import broker

    sent = []

    class Control:
        def broadcast(self, command, arguments, reply):
            sent.append([attempt[:2] for attempt in arguments["attempts"]])

    monkeypatch.setattr(broker, "_control", Control)
    monkeypatch.setattr(broker, "proved_attempts", lambda attempts, purpose: [[str(pk), n] for pk, n in attempts])
    return sent


def test_cancels_gathered_are_sent_a_few_hundred_a_broadcast_and_the_rest_at_the_end(monkeypatch, broadcasts):
    from workflows_app import broker

    monkeypatch.setattr(broker, "GATHERED_CANCELS", 3)
    with broker.cancels_gathered():
        with broker.cancels_gathered():  # an inner block gathers into the outer one
            for n in range(7):
                broker.broadcast_cancel([(f"op-{n}", 1)])
        assert [len(b) for b in broadcasts] == [3, 3]
    assert [len(b) for b in broadcasts] == [3, 3, 1]
    assert [pk for b in broadcasts for pk, _ in b] == [f"op-{n}" for n in range(7)]
    with pytest.raises(RuntimeError), broker.cancels_gathered():
        broker.broadcast_cancel([("op-last", 2)])
        raise RuntimeError("the block fails")
    assert broadcasts[-1] == [["op-last", 2]], "sent however the block ends"
    broker.broadcast_cancel([("op-alone", 1)])
    assert broadcasts[-1] == [["op-alone", 1]], "outside the block, at once"


@pytest.mark.django_db(transaction=True)
def test_a_bulk_cancel_asks_the_agents_once_per_many_executions(busy, broadcasts, outbox):
    executions = busy(9)
    outcome = run.act("cancel", Execution.objects.filter(workflow_id="bulk"), batch_size=4, workers=3)
    assert outcome.done == 9
    assert sorted(pk for b in broadcasts for pk, _ in b) == sorted(
        str(pk) for pk in Operation.objects.filter(execution__in=executions).values_list("pk", flat=True))
    assert len(broadcasts) <= 3, "at most one per thread, not one per execution"


@pytest.mark.django_db(transaction=True)
def test_a_broker_gone_when_the_gathered_cancels_are_sent_is_said_with_the_counts(monkeypatch, busy, broadcasts, outbox):
    from workflows_app import broker

    class Gone:
        def broadcast(self, command, arguments, reply):
            raise BrokerError("Connection refused.")

    busy(4)
    monkeypatch.setattr(broker, "_control", Gone)
    outcome = run.act("cancel", Execution.objects.filter(workflow_id="bulk"), workers=2)
    assert outcome.done == 4, "each was recorded cancelling: the managers ask its steps again"
    assert outcome.stopped.startswith("the message broker did not answer (Connection refused.) as the last cancels")
