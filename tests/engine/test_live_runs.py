"""Live runs (``engine.live``): a dispatcher process keeps a workflow function suspended between
passes instead of replaying it from the top, and replays whenever it keeps none — evicted,
overtaken by a pass elsewhere, or after a pass that rolled back — with the same result.

The dispatcher runs in this process (``dispatcher.run_pass``), the agents' reports are made here
on the database, the messages it would send are recorded (``outbox``). Transactions commit for
real (``transaction=True``): a run is kept only once its pass committed.
"""

import gc
import weakref

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests import workflows as workflows_module
from workflows_app import services
from workflows_app.engine import dispatcher, live, reports
from workflows_app.models import Operation
from workflows_app.states import ExecutionStatus, OperationState
from tests.engine.passes import run_pass

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("outbox")]


@pytest.fixture(autouse=True)
def setup():
    live.clear()
    workflows_module.CALLS.clear()
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"]):
        yield
    live.clear()


def succeed_current(execution):
    """The agent's claim and success of the step the execution waits for (the one not ended)."""
    operation = Operation.objects.get(execution_id=execution.pk, state__in=[OperationState.SENT, OperationState.SENDING])
    Operation.objects.filter(pk=operation.pk).update(state=OperationState.STARTED, started_at=timezone.now())
    operation.refresh_from_db()
    assert reports.record_success(operation, operation.attempt, operation.args[0] + operation.args[1])


def run_chain(execution, n, between=None):
    """Drive ``it_counted_chain`` to its end: each step succeeds, then a pass; ``between(i)``
    runs before the pass that follows step ``i``."""
    execution = run_pass(execution)
    for i in range(n):
        succeed_current(execution)
        if between:
            between(i)
        execution = run_pass(execution)
    return execution


def rows(execution):
    return sorted(Operation.objects.filter(execution_id=execution.pk).values_list("name", "state", "result"))


def replayed(n):
    """The step calls of ``it_counted_chain`` when every pass replays: pass k (k <= n) asks for
    k steps, the last k-1 of them done; the last pass asks for all n."""
    return n * (n + 1) // 2 + n


def expected_rows(n):
    return sorted((f"s{i}", OperationState.SUCCEEDED.value, i + 1) for i in range(n))


def test_a_kept_run_goes_on_from_where_it_stopped_without_replaying():
    n = 12
    execution = services.start("it_counted_chain", {"n": n, "tag": "kept"})
    kept = []
    execution = run_chain(execution, n, between=lambda i: kept.append(live.cached(execution.pk)))
    assert kept == [True] * n  # suspended at each step, the run was kept
    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    assert execution.payload == {"total": n}
    assert rows(execution) == expected_rows(n)
    assert workflows_module.CALLS["kept"] == n  # each step asked for once: no pass replayed
    assert execution.passes == n + 1
    assert not live.cached(execution.pk)  # an ended execution keeps nothing


@override_settings(WORKFLOWS={"WORKFLOW_CACHE_SIZE": 0})
def test_with_no_cache_every_pass_replays_to_the_same_result():
    n = 12
    execution = run_chain(services.start("it_counted_chain", {"n": n, "tag": "replayed"}), n)
    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    assert execution.payload == {"total": n}
    assert rows(execution) == expected_rows(n)
    assert workflows_module.CALLS["replayed"] == replayed(n)
    assert not live.cached(execution.pk)


@override_settings(WORKFLOWS={"WORKFLOW_CACHE_SIZE": 1})
def test_past_the_cache_size_the_least_recent_run_is_evicted_and_replays_to_the_same_result():
    n = 6
    first = run_pass(services.start("it_counted_chain", {"n": n, "tag": "first"}))
    second = run_pass(services.start("it_counted_chain", {"n": n, "tag": "second"}))
    assert live.cached(second.pk) and not live.cached(first.pk)  # one run kept at most
    for _ in range(n):  # the two take turns: each pass finds its run evicted by the other's
        for execution in (first, second):
            succeed_current(execution)
            run_pass(execution)
    for execution in (first, second):
        execution.refresh_from_db()
        assert execution.status == ExecutionStatus.COMPLETED, execution.error
        assert execution.payload == {"total": n}
        assert rows(execution) == expected_rows(n)
    assert workflows_module.CALLS["first"] == replayed(n)  # every pass replayed
    # ... and the second's too, but its last: the first had ended, and kept nothing in its place.
    assert workflows_module.CALLS["second"] == replayed(n) - n


def test_a_run_overtaken_by_a_pass_elsewhere_catches_up_and_replays_only_what_it_missed():
    n = 8
    execution = services.start("it_counted_chain", {"n": n, "tag": "overtaken"})
    behind = {}

    def elsewhere(i):
        if i == 2:  # another dispatcher process, without this run, makes the next two passes
            behind["run"] = live._cache.runs.pop(execution.pk)
        if i == 4:  # this process' old run is back for the next pass: two passes behind
            live.forget(execution.pk)
            live._put(execution.pk, behind["run"])

    execution = run_chain(execution, n, between=elsewhere)
    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    assert execution.payload == {"total": n}
    assert rows(execution) == expected_rows(n)
    # One call per pass, but: the replay elsewhere asks for s0-s3 (3 more), and the old run,
    # waiting on s2, asks again for s3 and s4, which the other passes stored (2 more).
    assert workflows_module.CALLS["overtaken"] == n + 3 + 2


@override_settings(WORKFLOWS={"WORKFLOW_CACHE_SIZE": 1})
def test_an_evicted_run_unwinds_without_storing_anything():
    waiting = run_pass(services.start("it_cleanup_after_event", {}))
    assert live.cached(waiting.pk)
    run_pass(services.start("it_cleanup_after_event", {}))  # evicts the first: its `finally` runs
    assert not live.cached(waiting.pk)
    assert not Operation.objects.filter(execution_id=waiting.pk).exists()  # ctx refused the call
    services.send_event(waiting.pk, "go", {"user": "ann"})
    waiting = run_pass(waiting)  # replays: the wait takes the event and the code goes on
    assert waiting.payload == {"go": {"user": "ann"}}
    assert list(Operation.objects.filter(execution_id=waiting.pk).values_list("name", flat=True)) == ["cleanup"]


@override_settings(WORKFLOWS={"WORKFLOW_CACHE_SIZE": 1})
def test_a_closed_run_is_freed_when_it_closes_not_by_the_garbage_collector():
    """Evicted or ended, a run's memory comes back at once, not at one of the cyclic garbage
    collector's full passes, which in a busy worker may come thousands of executions later."""
    gc.collect()
    gc.disable()
    try:
        evicted = run_pass(services.start("it_cleanup_after_event", {}))
        evicted_context = weakref.ref(live._cache.runs[evicted.pk].replay)
        ended = run_pass(services.start("it_counted_chain", {"n": 1, "tag": "freed"}))  # evicts the first
        assert evicted_context() is None
        ended_context = weakref.ref(live._cache.runs[ended.pk].replay)
        succeed_current(ended)
        assert run_pass(ended).status == ExecutionStatus.COMPLETED
        assert ended_context() is None
    finally:
        gc.enable()


def test_a_pass_that_rolls_back_keeps_no_run(monkeypatch):
    execution = run_pass(services.start("it_counted_chain", {"n": 3, "tag": "rolled"}))
    succeed_current(execution)

    def broken(*args, **kwargs):
        raise RuntimeError("the pass fails after the function went on")

    monkeypatch.setattr(dispatcher, "_conclude", broken)
    with pytest.raises(RuntimeError):
        dispatcher.run_pass(execution.pk)
    assert not live.cached(execution.pk)  # it went on past what the database holds: dropped
    monkeypatch.undo()
    execution = run_pass(execution)  # replays from the top, and stores step 1 once
    assert execution.passes == 2
    assert sorted(Operation.objects.filter(execution_id=execution.pk).values_list("name", flat=True)) == ["s0", "s1"]


def test_a_kill_drops_the_run():
    execution = run_pass(services.start("it_counted_chain", {"n": 3, "tag": "killed"}))
    assert live.cached(execution.pk)
    services.kill(execution.pk)
    run_pass(execution)
    assert not live.cached(execution.pk)


def test_a_pass_reads_no_steps_it_knows_cannot_exist_or_be_open():
    """A new execution has no steps to read; a kept run that completes has read each of its
    steps end and asks for none to cancel: only the catch-up reads the operations."""
    execution = services.start("it_counted_chain", {"n": 2, "tag": "reads"})

    def reads_of_operations():
        with CaptureQueriesContext(connection) as captured:
            advanced = run_pass(execution)
        return advanced, [q["sql"] for q in captured.captured_queries
                          if q["sql"].lstrip().upper().startswith("SELECT") and "workflows_app_operation" in q["sql"]]

    execution, first = reads_of_operations()
    assert first == []
    for _ in range(2):
        succeed_current(execution)
        execution, reads = reads_of_operations()
        assert len(reads) == 1, reads  # the steps the run left open
    assert execution.status == ExecutionStatus.COMPLETED
