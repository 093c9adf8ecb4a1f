"""What keeps waiting executions cheap when many wait (issue 19): the sweep for lost wake-ups
reads the started executions a batch per pass, and the benchmark's bulk clones of a waiting
execution are the rows the engine writes for one. The plans at 100,000 waiting are read in
tests/integration/test_wakeup_scale.py."""

from datetime import timedelta

import pytest
from django.utils import timezone

from bench.suspended import clone_waiting
from workflows_app import services
from workflows_app.engine import dispatcher, tick
from workflows_app.models import Event, Execution, Wait
from workflows_app.states import ExecutionStatus, WaitOutcome

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("with_the_test_workflows")]


def test_the_sweep_reads_a_batch_of_started_executions_per_pass_and_comes_round_again(make_execution, outbox, monkeypatch):
    monkeypatch.setattr(tick, "SWEEP_BATCH", 2)
    monkeypatch.setattr(tick, "_sweep_after", None)
    long_ago = timezone.now() - timedelta(minutes=5)
    # Started, nothing in flight, no wait: their wake-ups were lost.
    lost = {str(make_execution(status=ExecutionStatus.STARTED, started_at=long_ago).pk) for _ in range(5)}
    passes = []
    for _ in range(3):
        outbox["advance"].clear()
        tick.resend_stuck_messages(timezone.now())
        passes.append(set(outbox["advance"]))
    assert [len(sent) for sent in passes] == [2, 2, 1]
    assert set().union(*passes) == lost
    outbox["advance"].clear()
    tick.resend_stuck_messages(timezone.now())
    assert set(outbox["advance"]) == passes[0], "after the last batch, the first again"


def test_a_clone_of_a_waiting_execution_is_the_rows_the_engine_wrote_for_it_and_wakes_as_it_would(outbox):
    first = services.start("it_events", {"waits": [["go", None]]})
    dispatcher.run_pass(first.pk)
    outbox["advance"].clear()  # the start's
    clones = clone_waiting(first.pk, 3)

    def rows(execution_id):
        execution = Execution.objects.filter(pk=execution_id).values().get()
        waits = list(Wait.objects.filter(execution_id=execution_id).order_by("id").values())
        events = list(Event.objects.filter(execution_id=execution_id).order_by("id").values())
        for row in (execution, *waits, *events):
            for own in ("id", "execution_id", "token_hash"):
                row.pop(own, None)  # an execution row has no execution_id, the others no token
        return execution, waits, events

    assert len(set(clones)) == 3 and first.pk not in clones
    assert all(rows(clone) == rows(first.pk) for clone in clones)
    hashes = set(Execution.objects.values_list("token_hash", flat=True))
    assert len(hashes) == 4 and all(len(h) == 64 for h in hashes), "each clone has a token of its own"
    assert not outbox["advance"], "a clone waits, as its original does"

    services.send_event(clones[1], "go", "hello")
    dispatcher.run_pass(clones[1])
    woken = Execution.objects.get(pk=clones[1])
    assert (woken.status, woken.payload) == (ExecutionStatus.COMPLETED, {"got": ["hello"]})
    assert Wait.objects.filter(outcome=WaitOutcome.WAITING).count() == 3, "the others wait on"
