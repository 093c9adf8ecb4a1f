"""The limits of operations, kept when the managers send (``workflows_app.flow.gate``): a step
beyond its operation's concurrency or rate waits ``pending`` saying why, and goes, oldest first,
when an attempt of its key ends or its rate window moves on. The dispatcher runs in this process;
the messages are recorded instead of sent (the real processes: tests/integration/test_flow.py)."""

from datetime import timedelta

import pytest

from tests.engine.passes import run_pass
from workflows_app import clock, services
from workflows_app.engine import progress, reports, tick
from workflows_app.flow import gate
from workflows_app.models import Event, Operation, RateSend
from workflows_app.states import ExecutionStatus, FlowWait, OperationState

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("with_the_test_workflows")]


@pytest.fixture
def commits(django_capture_on_commit_callbacks):
    """Run what each block leaves for after its commit (the gate's drain, the messages)."""
    def block():
        return django_capture_on_commit_callbacks(execute=True)
    return block


def start(commits, op, n, **parameters):
    with commits():
        execution = services.start("it_limited_fan_out", {"op": op, "n": n, "agents": ["a1"], **parameters},
                                   failure_mode="continue_while_possible")
    with commits():
        return run_pass(execution)


def states(execution) -> dict:
    return {op.name: (op.state, op.flow_wait) for op in Operation.objects.filter(execution_id=execution.pk).order_by("name")}


def end(commits, execution, name, outcome="succeed"):
    operation = Operation.objects.get(execution_id=execution.pk, name=name)
    Operation.objects.filter(pk=operation.pk).update(state=OperationState.STARTED)
    operation.refresh_from_db()
    with commits():
        if outcome == "succeed":
            assert reports.record_success(operation, operation.attempt, None)
        else:
            assert reports.record_failure(operation, operation.attempt, {"type": "E", "message": "x"}, retryable=False)


SENT = (OperationState.SENDING, OperationState.SENT)


def test_beyond_its_concurrency_a_step_waits_pending_saying_why_and_goes_when_a_slot_frees(commits, outbox):
    execution = start(commits, "it_limited", 5)
    assert outbox["operation"] == ["s000", "s001"], "two at once, the first asked for first"
    found = states(execution)
    assert [found[f"s00{i}"] for i in (2, 3, 4)] == [(OperationState.PENDING, FlowWait.CONCURRENCY)] * 3
    waiting = Event.objects.filter(execution=execution, operation="s002", type="log").get()
    assert waiting.data == {"waiting_for": "concurrency", "key": "concurrency:it_limited"}
    assert "waiting" in waiting.message

    end(commits, execution, "s000")
    assert outbox["operation"] == ["s000", "s001", "s002"], "the oldest waiting one takes the free slot"
    end(commits, execution, "s001", outcome="fail")
    assert outbox["operation"][-1] == "s003", "a failed attempt frees its slot too"
    assert states(execution)["s003"] in {(state, "") for state in SENT}
    assert Event.objects.filter(execution=execution, operation="s003", type="log").count() == 1, "said once"


def test_a_slot_counts_across_executions_and_the_older_ask_goes_first(commits, outbox):
    first = start(commits, "it_limited", 3)
    second = start(commits, "it_limited", 2)
    assert outbox["operation"] == ["s000", "s001"]
    assert {s for s, _ in states(second).values()} == {OperationState.PENDING}
    end(commits, first, "s000")
    assert states(first)["s002"][0] in SENT, "the first execution's step was asked for first"
    assert {s for s, _ in states(second).values()} == {OperationState.PENDING}
    end(commits, first, "s001")
    end(commits, first, "s002")
    assert all(s in SENT for s, _ in states(second).values())


def test_a_key_by_parameter_limits_each_value_on_its_own(commits, outbox):
    execution = start(commits, "it_per_account", 4, accounts=["acme", "globex"])
    found = states(execution)
    assert found["s000"][0] in SENT and found["s001"][0] in SENT, "one of each account"
    assert found["s002"] == (OperationState.PENDING, FlowWait.CONCURRENCY)
    assert Operation.objects.get(execution=execution, name="s003").concurrency_key == 'concurrency:it_per_account="globex"'
    end(commits, execution, "s001")
    found = states(execution)
    assert found["s003"][0] in SENT and found["s002"][0] == OperationState.PENDING, "globex's slot, not acme's"


def test_a_rate_sends_at_most_its_count_in_a_window_and_the_rest_when_it_moves_on(commits, outbox):
    now = [clock.now()]
    with clock.using(lambda: now[0]):
        execution = start(commits, "it_rated", 8)
        assert len(outbox["operation"]) == 5
        held = sorted(name for name, found in states(execution).items() if found[0] == OperationState.PENDING)
        assert len(held) == 3 and all(states(execution)[name][1] == FlowWait.RATE_LIMIT for name in held)
        with commits():
            due = gate.drain_waiting()
        assert len(outbox["operation"]) == 5, "the same window: nothing more"
        assert 0 < due <= 1.0, "it says when the window lets one more through"
        now[0] += timedelta(seconds=0.5)
        with commits():
            gate.drain_waiting()
        assert len(outbox["operation"]) == 5, "half a second on: the five are still in the last second"
        now[0] += timedelta(seconds=0.51)
        with commits():
            tick.run(now[0])  # the tick drains too
        assert sorted(outbox["operation"][5:]) == held
    assert RateSend.objects.filter(key="rate:it_rated").count() <= 5, "older sends are forgotten"


def test_a_due_retry_waits_for_the_limit_like_a_first_attempt(commits, outbox):
    execution = start(commits, "it_limited", 3)
    holder = Operation.objects.get(execution=execution, name="s000")
    Operation.objects.filter(pk=holder.pk).update(max_retries=1, retry_interval=0)
    end_states = {}
    holder.refresh_from_db()
    Operation.objects.filter(pk=holder.pk).update(state=OperationState.STARTED)
    holder.refresh_from_db()
    with commits():
        reports.record_failure(holder, holder.attempt, {"type": "E", "message": "again"}, retryable=True)
    assert outbox["operation"] == ["s000", "s001", "s002"], "its slot went to the oldest waiting step"
    with commits():
        progress.send_due_retries(clock.now() + timedelta(seconds=1))
    end_states = states(execution)
    assert end_states["s000"] == (OperationState.RESCHEDULED, FlowWait.CONCURRENCY), "the retry waits for a slot"
    end(commits, execution, "s001")
    assert outbox["operation"][-1] == "s000" and states(execution)["s000"][0] in SENT


def test_a_stopped_execution_sends_none_of_its_waiting_steps(commits, outbox):
    execution = start(commits, "it_limited", 4)
    with commits():
        services.cancel(execution.pk)
    end_states = states(execution)
    assert end_states["s002"][0] == OperationState.CANCELLED and end_states["s003"][0] == OperationState.CANCELLED
    with commits():
        gate.drain_waiting()
    assert outbox["operation"] == ["s000", "s001"]


def test_an_operation_without_limits_is_sent_where_it_is_ready(commits, outbox, make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.STARTED)
    op = make_operation(OperationState.PENDING, execution, name="free", operation="it_add", kwargs={"x": 1})
    with commits():
        progress.send_ready(execution, [op])
    assert outbox["operation"] == ["free"] and not Operation.objects.get(pk=op.pk).flow_wait


def test_what_waits_is_told_in_the_warnings_the_metrics_and_the_workflows_list(commits, outbox, admin_client):
    from workflows_app import metrics, queries

    execution = start(commits, "it_limited", 5)

    def limited():
        return [w for w in queries.warnings(execution.pk) if w["code"] != "unknown_agent"]

    assert limited() == [{
        "code": "concurrency_limited", "step": "s002",
        "message": "step 's002' and 2 other steps of operation 'it_limited' wait for a free slot of its operation's "
                   "concurrency (key concurrency:it_limited)"}]
    scrape = metrics.exposition().decode()
    assert 'switchyard_operations_waiting{operation="it_limited",reason="concurrency"} 3.0' in scrape
    listed = admin_client.get("/api/v1/workflows").json()["results"]
    limits = {item["operation"]: item for item in listed[0]["operation_limits"]}
    assert limits["it_limited"] == {"operation": "it_limited", "rate_limit": None, "rate_key": None,
                                    "concurrency": 2, "concurrency_key": None}
    assert limits["it_per_account"]["rate_limit"] == "100/s" and limits["it_per_account"]["rate_key"] == "agent"
    for name in ("s000", "s001", "s002", "s003"):
        end(commits, execution, name)
    assert limited() == []
    assert 'switchyard_operations_waiting{operation="it_limited"' not in metrics.exposition().decode()


def test_the_admin_page_shows_what_a_step_waits_for(commits, outbox, admin_client):
    execution = start(commits, "it_limited", 3)
    page = admin_client.get(f"/admin/workflows_app/execution/{execution.pk}/change/").content.decode()
    assert page.count("waits for a free slot of its operation&#x27;s concurrency (concurrency:it_limited)") == 1


def test_sends_older_than_any_period_are_forgotten_whichever_key_they_counted_for(commits, outbox, monkeypatch):
    now = clock.now()
    RateSend.objects.bulk_create([RateSend(key="rate:gone=1", sent_at=now - timedelta(hours=2)),
                                  RateSend(key="rate:gone=2", sent_at=now - timedelta(minutes=59))])
    monkeypatch.setattr(gate, "_forgot_at", None)
    gate.drain_waiting()
    assert list(RateSend.objects.values_list("key", flat=True)) == ["rate:gone=2"], "an hour is the longest period"
