"""The grant an attempt's message carries: which deliveries run unasked (``agents.worker.grants``),
the agent's journal that takes each attempt once (``agents.worker.journal``), what the managers do
with a ``started`` report (``agents.intake``), and how a cancel waits for the attempts its agents
have not answered for (``workflows_app.engine.grants``). The races themselves, with real agents,
are in ``tests/integration/test_delivery_races.py``."""

import time
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from agents import intake
from agents import models as agent_models
from agents.runner import run_operation
from agents.worker import grants as agent_grants
from agents.worker import journal, local
from tests.agents.test_intake import AGENT, signed, success
from workflows_app import broker, clock, signing, wire
from workflows_app.conf import workflows_settings
from workflows_app.engine import grants, stopping
from workflows_app.models import Event, Execution, Operation
from workflows_app.registry import operation
from workflows_app.states import EventType, ExecutionStatus, OperationState
from workflows_app.transitions import operation_transition
from workflows_app.wire import keys

KEY = "6a1c2f4e-0000-4000-8000-000000000001.1"


@pytest.fixture
def agent_dir(tmp_path, monkeypatch):
    """This process as agent ``host-1``, its files under a directory of the test's own."""
    monkeypatch.setenv(local.NAME_ENV, AGENT)
    monkeypatch.setenv("SWITCHYARD_VAR_DIR", str(tmp_path))
    return tmp_path


# --- the journal ---------------------------------------------------------------------------

def test_the_journal_takes_an_attempt_once(agent_dir):
    assert journal.begin(KEY) is True
    assert journal.begin(KEY) is False, "a second delivery never starts it again"
    assert journal.read(KEY) == journal.RUN
    journal.end(KEY)
    assert journal.read(KEY) == journal.END and journal.begin(KEY) is False


def test_a_stop_before_any_delivery_refuses_the_attempt_for_good(agent_dir):
    assert journal.stop(KEY) == "refused"
    assert journal.begin(KEY) is False, "no delivery starts a stopped attempt"
    assert journal.stop(KEY) == "refused", "asked again, the same answer"


def test_a_stop_after_the_start_answers_running_then_ended(agent_dir):
    assert journal.begin(KEY)
    local.mark_running(KEY)
    assert journal.stop(KEY) == "running"
    local.mark_done(KEY)
    journal.end(KEY)
    assert journal.stop(KEY) == "ended"


# --- which deliveries run unasked -------------------------------------------------------------

def _grant(now, *, granted_ago=1.0, lasts=30.0):
    return {"operation": "noop", "execution": "e", "step": "s", "args": [], "kwargs": {}, "dry_run": False,
            "retries_left": 0, "granted": now - granted_ago, "deadline": now - granted_ago + lasts}


def test_a_first_delivery_of_a_live_grant_runs_unasked():
    now = time.time()
    agent_grants.mark_connected(now - 60)
    assert agent_grants.why_asked(_grant(now), {"redelivered": False}, now) is None


@pytest.mark.parametrize("case, why", [
    ("redelivered", "delivers it again"),
    ("expired", "grant expired"),
    ("expires-within-the-skew", "grant expired"),
    ("granted-before-the-connection", "before this worker's broker connection"),
    ("no-connection-recorded", "before this worker's broker connection"),
])
def test_any_other_delivery_claims(case, why):
    now = time.time()
    agent_grants.mark_connected(float("inf") if case == "no-connection-recorded" else now - 60)
    grant = _grant(now)
    info = {"redelivered": case == "redelivered"}
    if case == "expired":
        grant = _grant(now, granted_ago=40)
    if case == "expires-within-the-skew":
        grant = _grant(now, lasts=1.0 + wire.CLOCK_SKEW_SECONDS / 2)
    if case == "granted-before-the-connection":
        agent_grants.mark_connected(now)
    assert why in agent_grants.why_asked(grant, info, now)


def test_a_grant_must_have_what_running_the_attempt_takes():
    now = time.time()
    assert agent_grants.is_grant(_grant(now))
    assert not agent_grants.is_grant({**_grant(now), "args": "x"})
    assert not agent_grants.is_grant({**_grant(now), "deadline": None})


# --- the managers: the grant, and what a started report does -------------------------------------

@pytest.fixture
def sent(make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.STARTED)
    op = make_operation(OperationState.PENDING, execution, agent=AGENT, name="long")
    operation_transition(op, OperationState.SENDING)
    operation_transition(op, OperationState.SENT, attempt=op.attempt)
    return op


@pytest.mark.parametrize("seconds", [5, 90])
def test_grant_seconds_sets_until_when_a_sent_attempt_may_start_unasked(make_execution, make_operation, seconds):
    with override_settings(WORKFLOWS={"GRANT_SECONDS": seconds}):
        op = make_operation(OperationState.PENDING, make_execution(status=ExecutionStatus.STARTED), agent=AGENT)
        operation_transition(op, OperationState.SENDING)
        grant = grants.grants([op])[op.pk]
    assert op.granted_until - op.sending_at == timedelta(seconds=seconds)
    assert grant["deadline"] - grant["granted"] == pytest.approx(seconds)


def test_the_managers_own_operations_and_local_steps_travel_without_a_grant(make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.STARTED)
    for fields in ({"agent": workflows_settings.MANAGEMENT_QUEUE}, {"agent": AGENT, "local": True}):
        op = make_operation(OperationState.PENDING, execution, **fields)
        operation_transition(op, OperationState.SENDING)
        assert grants.grants([op]) == {}, "claimed as it comes"


def test_a_started_report_starts_a_sent_attempt_as_a_claim_would(sent):
    intake.take([signed("started", sent, pid=42, at=time.time())])
    sent.refresh_from_db()
    assert (sent.state, sent.incarnation) == (OperationState.STARTED, "run-1")
    event = Event.objects.get(execution_id=sent.execution_id, type=EventType.TASK_STARTED)
    assert event.data["pid"] == 42 and event.data["unasked"] is True
    intake.take([signed("started", sent, pid=42, at=time.time())])  # again: nothing more
    assert Event.objects.filter(execution_id=sent.execution_id, type=EventType.TASK_STARTED).count() == 1


def test_an_outcome_that_carries_its_start_records_both(sent):
    intake.take([success(sent, started=42, started_at=time.time())])
    sent.refresh_from_db()
    assert (sent.state, sent.result) == (OperationState.SUCCEEDED, "done")
    types = list(Event.objects.filter(execution_id=sent.execution_id).order_by("pk").values_list("type", flat=True))
    assert types[-2:] == [EventType.TASK_STARTED, EventType.TASK_SUCCEEDED]


def test_a_loss_that_carries_its_start_records_both_in_order(sent):
    """A granted attempt whose process died before its start was reported: its loss says when it
    started, in the same report, so that no manager stores the loss of an attempt never started."""
    intake.take([signed("lost", sent, message="its worker process was lost", started=42, started_at=time.time())])
    sent.refresh_from_db()
    assert (sent.state, sent.attempt) == (OperationState.RESCHEDULED, 1)
    types = list(Event.objects.filter(execution_id=sent.execution_id).order_by("pk").values_list("type", flat=True))
    assert types[-2:] == [EventType.TASK_STARTED, EventType.TASK_RESCHEDULED]


def test_a_started_report_of_a_cancelled_attempt_is_stopped(sent, outbox, django_capture_on_commit_callbacks):
    Operation.objects.filter(pk=sent.pk).update(state=OperationState.CANCELLED)
    with django_capture_on_commit_callbacks(execute=True):
        intake.take([signed("started", sent, pid=42, at=time.time())])
    assert outbox["kill"] == [[(str(sent.pk), sent.attempt)]], "its process group is stopped"
    note = Event.objects.filter(execution_id=sent.execution_id, type=EventType.LOG).last()
    assert "may not run: stopped" in note.message


# --- a cancel and the agents' answers ------------------------------------------------------------

def _answering(monkeypatch, answer):
    asked = []

    def stop(attempts, hosts):
        asked.extend(attempts)
        return {} if answer is None else {(str(pk), attempt): answer for pk, attempt in attempts}

    monkeypatch.setattr(broker, "broadcast_stop", stop)
    monkeypatch.setattr(grants, "_hosts", lambda names: {name: "box" for name in names})
    grants._unanswered.clear()
    grants._unanswered_executions.clear()
    return asked


@pytest.mark.parametrize("answer, status, kept", [
    ("refused", ExecutionStatus.CANCELLED, False),
    (None, ExecutionStatus.CANCELLING, True),
])
def test_a_cancel_ends_once_the_agent_answered_or_the_grant_expired(sent, monkeypatch, outbox, answer, status, kept):
    asked = _answering(monkeypatch, answer)
    execution = Execution.objects.get(pk=sent.execution_id)
    stopping.stop(execution, ExecutionStatus.CANCELLING, "cancel")
    assert asked == [(sent.pk, sent.attempt)]
    sent.refresh_from_db()
    assert sent.state == OperationState.CANCELLED and (sent.granted_until is not None) == kept
    assert execution.status == status
    if kept:  # the grant expires: the execution ends then
        later = sent.granted_until + timedelta(seconds=1)
        monkeypatch.setattr(clock, "now", lambda: later)
        stopping.carry_on(execution)
        assert execution.status == ExecutionStatus.CANCELLED


@pytest.mark.parametrize("answer", ["running", "ended"])
def test_a_kill_kills_an_attempt_its_agent_says_it_started(sent, monkeypatch, outbox, answer):
    """Running or ended there, it began: its start is recorded, and it ends as a started one."""
    _answering(monkeypatch, answer)
    execution = Execution.objects.get(pk=sent.execution_id)
    stopping.stop(execution, ExecutionStatus.KILL_CANCELLING, "kill")
    sent.refresh_from_db()
    assert (sent.state, sent.error["message"]) == (OperationState.CANCELLED, "killed")
    assert execution.status == ExecutionStatus.CANCELLED
    started = Event.objects.get(execution_id=sent.execution_id, type=EventType.TASK_STARTED)
    assert started.data["reported"] == "its agent's answer to a stop"


def test_an_agent_that_never_registered_holds_nothing_up(sent, monkeypatch, outbox):
    monkeypatch.setattr(grants, "_hosts", lambda names: {})
    monkeypatch.setattr(broker, "broadcast_stop", lambda attempts, hosts: pytest.fail("nobody to ask"))
    execution = Execution.objects.get(pk=sent.execution_id)
    stopping.stop(execution, ExecutionStatus.CANCELLING, "cancel")
    assert execution.status == ExecutionStatus.CANCELLED


def test_an_agent_whose_host_is_not_known_yet_is_waited_for(sent, monkeypatch, outbox):
    """Its row has no host yet (its registration found no reports queue, and its heartbeats had
    not said): it may hold the attempt, and cannot be asked, so its grant is waited for."""
    _answering(monkeypatch, "refused")
    monkeypatch.setattr(grants, "_hosts", agent_models.hosts)
    monkeypatch.setattr(broker, "broadcast_stop", lambda attempts, hosts: pytest.fail("no host to ask"))
    agent_models.Agent.objects.create(name=AGENT, incarnation="run-1", last_heartbeat=timezone.now())
    execution = Execution.objects.get(pk=sent.execution_id)
    stopping.stop(execution, ExecutionStatus.CANCELLING, "cancel")
    sent.refresh_from_db()
    assert (execution.status, sent.state) == (ExecutionStatus.CANCELLING, OperationState.CANCELLED)
    assert sent.granted_until is not None, "held until its grant expires"


def test_a_grant_that_expired_holds_nothing_up(sent, monkeypatch, outbox):
    _answering(monkeypatch, None)
    Operation.objects.filter(pk=sent.pk).update(granted_until=timezone.now() - timedelta(seconds=1))
    execution = Execution.objects.get(pk=sent.execution_id)
    stopping.stop(execution, ExecutionStatus.CANCELLING, "cancel")
    assert execution.status == ExecutionStatus.CANCELLED


# --- a granted delivery, run by the runner -------------------------------------------------------

GRANT_CALLS = []


@operation(name="test_grants_probe", max_retries=0)
def probe(ctx, value):
    GRANT_CALLS.append((ctx.operation_id, ctx.attempt, value))
    return value * 2


@pytest.fixture
def granted(agent_link, agent_dir, make_execution, make_operation, monkeypatch):
    """A sent attempt of ``test_grants_probe``, this process its agent's worker (connected a minute
    ago); returns it with a function that delivers its message (``change``: fields of its grant
    changed on the way)."""
    GRANT_CALLS.clear()
    monkeypatch.setattr(broker, "send_advance", lambda pk, workflow_id=None, countdown=None: None)
    op = make_operation(OperationState.PENDING, make_execution(status=ExecutionStatus.STARTED), agent=AGENT,
                        operation="test_grants_probe", args=[21], name="probe")
    operation_transition(op, OperationState.SENDING)
    operation_transition(op, OperationState.SENT, attempt=op.attempt)
    grant = grants.grants([op])[op.pk]
    proof = keys.prove(signing.agent_key(AGENT), keys.Purpose.OPERATION, [str(op.pk), op.attempt, grant])
    agent_grants.mark_connected(time.time() - 60)

    def deliver(**change):
        run_operation.run(str(op.pk), op.attempt, proof=proof, grant={**grant, **change})

    yield op, deliver
    agent_grants.mark_connected(float("inf"))


def test_a_granted_first_delivery_runs_at_once_and_reports_once(granted, agent_link):
    op, deliver = granted
    deliver()
    op.refresh_from_db()
    assert (op.state, op.result, GRANT_CALLS) == (OperationState.SUCCEEDED, 42, [(op.pk, 1, 21)])
    assert [report["kind"] for report in agent_link.reports] == ["started", "outcome"], "no claim, no answer"


def test_a_second_delivery_of_a_granted_attempt_runs_nothing(granted, agent_link):
    op, deliver = granted
    deliver()
    deliver()
    assert len(GRANT_CALLS) == 1
    assert agent_link.reports[-2]["kind"] == "outcome", "its outcome sent again: stored once"
    assert "dropped" in Event.objects.filter(execution_id=op.execution_id, type=EventType.LOG).last().message


def test_a_grant_changed_on_its_way_runs_nothing(granted, agent_link):
    op, deliver = granted
    deliver(args=[1000])
    assert GRANT_CALLS == [] and agent_link.reports == []
    op.refresh_from_db()
    assert op.state == OperationState.SENT


# (NaN and infinity cannot even be proved: JSON has none, and the intake reads JSON.)
@pytest.mark.parametrize("at", [-1.0, 1e300, "x\x00", "\ud800", "x" * 3_000_000])
def test_a_started_report_with_a_time_that_is_none_is_refused_and_the_batch_goes_on(sent, at):
    intake.take([signed("started", sent, pid=1, at=at), signed("log", sent, message="next", data={})])
    sent.refresh_from_db()
    assert sent.state == OperationState.SENT, "refused: nothing started"
    assert Event.objects.filter(execution_id=sent.execution_id, type=EventType.LOG, message="next").exists()
