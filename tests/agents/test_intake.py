"""The managers' intake (``agents.intake.take``): what agents report enters the database only when
it is well formed and proved with the key of the agent that reports it, and is about an attempt
sent to that agent; reports are stored in batches, in any order, any number of times."""

import logging
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from agents import intake
from agents.models import Agent
from workflows_app import signing, wire
from workflows_app.models import Event, Operation
from workflows_app.states import EventType, ExecutionStatus, OperationState
from workflows_app.wire import keys

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outbox")]

AGENT = "host-1"


def prove(body, agent=None):
    """``body`` with its proof under the key of ``agent`` (by default the one it names)."""
    body = keys.without_proof(body)
    return {**body, "proof": keys.prove(signing.agent_key(agent or body["agent"]), keys.Purpose.REPORT, body)}


def signed(kind, operation, attempt=None, agent=AGENT, **fields):
    attempt = operation.attempt if attempt is None else attempt
    body = {"kind": kind, "agent": agent, "incarnation": "run-1", "operation": str(operation.pk), "attempt": attempt,
            **fields}
    if kind == "claim":
        body.setdefault("pid", 1)
        body.setdefault("reply_to", wire.reply_queue(agent, "box", 1))
        body.setdefault("id", "c1")
    return prove(body)


def success(operation, result="done", **options):
    return signed("outcome", operation, outcome="succeeded", result=result, **options)


@pytest.fixture
def started(make_operation):
    return make_operation(OperationState.STARTED, agent=AGENT, attempt=1, incarnation="run-1", started_at=timezone.now())


def test_a_proved_outcome_is_stored(started):
    assert intake.take([success(started)]) == []
    started.refresh_from_db()
    assert (started.state, started.result) == (OperationState.SUCCEEDED, "done")


@pytest.mark.parametrize("forge", [
    lambda body: {**body, "proof": "0" * 64},  # a guess
    lambda body: prove(body, agent="host-2"),  # another agent's key, speaking for host-1
    lambda body: {**body, "attempt": 2},  # host-1's proof of attempt 1, for another attempt
    lambda body: {**body, "result": "forged"},  # a proved report, its result changed
    lambda body: {**body, "proof": body["proof"].upper()},  # not a proof's form
    lambda body: {**body, "proof": keys.prove(signing.agent_key(AGENT), keys.Purpose.ANSWER, keys.without_proof(body))},
], ids=["guess", "other-agents-key", "other-attempt", "changed", "upper-case", "proof-of-another-purpose"])
def test_a_forged_outcome_changes_nothing_and_is_logged(started, forge, caplog):
    body = forge(success(started, result="done"))
    with caplog.at_level(logging.WARNING, logger="agents.intake"):
        intake.take([body])
    started.refresh_from_db()
    assert (started.state, started.result) == (OperationState.STARTED, None)
    assert not Event.objects.filter(execution_id=started.execution_id, type=EventType.STALE_REPORT).exists()
    assert "not proved with that agent's key" in caplog.text or "report refused: proof" in caplog.text


def test_a_rotated_key_proves_nothing_and_the_new_one_does(started, caplog):
    old = success(started)
    signing.rotate(AGENT)
    with caplog.at_level(logging.WARNING, logger="agents.intake"):
        intake.take([old])
    started.refresh_from_db()
    assert started.state == OperationState.STARTED and "not proved with that agent's key" in caplog.text
    intake.take([success(started)])  # proved anew, with the key rotate made
    started.refresh_from_db()
    assert started.state == OperationState.SUCCEEDED


def test_a_report_for_an_operation_that_does_not_exist_changes_nothing_and_is_logged(started, caplog):
    ghost = Operation(pk=uuid.uuid4(), attempt=1, agent=AGENT)
    with caplog.at_level(logging.WARNING, logger="agents.intake"):
        intake.take([success(ghost)])
    assert "which does not exist" in caplog.text
    assert Event.objects.count() == 0


@pytest.mark.parametrize("body", [
    "not an object", [], {}, {"kind": "nonsense", "agent": AGENT, "incarnation": ""},
    lambda: prove({"kind": "outcome", "agent": AGENT, "incarnation": "", "operation": "not-a-uuid", "attempt": 1}),
    {"kind": "outcome", "agent": "", "incarnation": "", "operation": str(uuid.uuid4()), "attempt": 1, "proof": "0" * 64},
    {"kind": "heartbeat", "agent": AGENT, "proof": "0" * 64},
    lambda: prove({"kind": "gone", "agent": AGENT, "incarnation": "", "attempts": [["x", 1]]}),
    lambda: prove({"kind": "claim", "agent": AGENT, "incarnation": "", "operation": str(uuid.uuid4()), "attempt": True}),
    lambda: prove({"kind": "outcome", "agent": AGENT, "incarnation": "", "operation": str(uuid.uuid4()), "attempt": 1,
                   "outcome": "failed", "error": {"type": "X", "message": 7}}),
    # An error larger than MAX_PAYLOAD_BYTES (stored, it was served past the limit).
    lambda: prove({"kind": "outcome", "agent": AGENT, "incarnation": "", "operation": str(uuid.uuid4()), "attempt": 1,
                   "outcome": "failed", "error": {"type": "X", "message": "x" * (2 * 1024 * 1024 + 1)}}),
    # A heartbeat that carries more than a heartbeat (one of 40 MB doubled a manager's memory).
    lambda: prove({"kind": "heartbeat", "agent": AGENT, "incarnation": "", "padding": "x" * 100}),
    # Text the database cannot store (a NUL failed the whole batch; a lone surrogate could not be encoded).
    lambda: prove({"kind": "heartbeat", "agent": AGENT, "incarnation": "", "hostname": "box\x00"}),
    lambda: prove({"kind": "register", "agent": AGENT, "incarnation": "", "hostname": "box\ud800", "pid": 1,
                   "concurrency": 1}),
    # Not a proof: other characters (non-ASCII ones raised a traceback and sent the batch round
    # again one by one), another length, none, and the secret reports carried before proofs.
    lambda: {**success(Operation(pk=uuid.uuid4(), attempt=1)), "proof": "é" * 64},
    lambda: {**success(Operation(pk=uuid.uuid4(), attempt=1)), "proof": "0" * 63},
    lambda: keys.without_proof(success(Operation(pk=uuid.uuid4(), attempt=1))),
    lambda: prove({**keys.without_proof(success(Operation(pk=uuid.uuid4(), attempt=1))), "secret": "0" * 64}),
], ids=["text", "list", "empty", "kind", "operation", "agent", "incarnation", "gone", "attempt", "error-type",
        "error-too-large", "fat-heartbeat", "nul-host", "surrogate-host", "non-ascii-proof", "short-proof", "no-proof", "secret"])
def test_a_malformed_report_is_refused_and_the_rest_of_its_batch_is_stored(started, body, caplog):
    body = body() if callable(body) else body  # a proof is made with the test's database
    with caplog.at_level(logging.WARNING, logger="agents.intake"):
        intake.take([body, success(started)])
    assert "report refused" in caplog.text and "Traceback" not in caplog.text
    started.refresh_from_db()
    assert started.state == OperationState.SUCCEEDED


def test_a_batch_stores_its_reports_in_any_order_and_each_only_once(make_execution, make_operation):
    execution = make_execution()
    ops = [make_operation(OperationState.STARTED, execution, name=f"s{i}", agent=AGENT, attempt=1) for i in range(5)]
    reports = [success(op, result=i) for i, op in enumerate(ops)]
    intake.take(list(reversed(reports)) + reports[:2])  # backwards, and two of them twice
    assert sorted(Operation.objects.filter(execution=execution).values_list("result", flat=True)) == [0, 1, 2, 3, 4]
    stale = Event.objects.filter(execution=execution, type=EventType.STALE_REPORT)
    assert stale.count() == 2, "a duplicate is kept as a stale report and changes nothing"


def test_a_claim_is_answered_with_what_to_run_and_nothing_else(make_execution, make_operation):
    execution = make_execution(parameters={"password": "hunter2"})
    first = make_operation(OperationState.SUCCEEDED, execution, name="first", agent=AGENT, attempt=1, result=[1, 2])
    sent = make_operation(OperationState.SENT, execution, name="second", operation="add", agent=AGENT, attempt=1,
                          args=[3], kwargs={"y": 4}, input={"result": first.name})
    [(reply_to, answer)] = intake.take([signed("claim", sent, id="the-claim")])
    assert reply_to == wire.reply_queue(AGENT, "box", 1)
    assert keys.proven(answer["proof"], signing.agent_key(AGENT), keys.Purpose.ANSWER, keys.without_proof(answer)), \
        "the answer is proved for its agent: anyone may publish to a reply queue"
    assert keys.without_proof(answer) == {
        "id": "the-claim", "verdict": "run", "operation": "add", "execution": str(execution.pk), "step": "second",
        "args": [[1, 2], 3], "kwargs": {"y": 4}, "dry_run": False, "retries_left": 3}
    sent.refresh_from_db()
    assert (sent.state, sent.incarnation) == (OperationState.STARTED, "run-1")


def test_a_claim_whose_answer_would_go_to_another_agents_queue_is_refused(make_operation):
    sent = make_operation(OperationState.SENT, agent=AGENT, attempt=1)
    assert intake.take([signed("claim", sent, reply_to="host-2.replies.box.1")]) == []
    assert intake.take([signed("claim", sent, reply_to=AGENT)]) == [], "nor into the agent's own task queue"
    sent.refresh_from_db()
    assert sent.state == OperationState.SENT


def test_a_claim_of_a_started_attempt_says_which_run_started_it(started):
    [(_, answer)] = intake.take([signed("claim", started)])
    assert answer["verdict"] == "started" and answer["incarnation"] == "run-1"
    # The run that claimed it gets what running it takes: the answer to its claim may have been
    # lost (a manager stored the claim and died), and then nothing ran it.
    assert answer["operation"] == started.operation and answer["step"] == started.name
    other_run = prove({**signed("claim", started, id="c2"), "incarnation": "run-2"})
    [(_, answer)] = intake.take([other_run])
    assert keys.without_proof(answer) == {"id": "c2", "verdict": "started", "incarnation": "run-1"}, \
        "another run learns nothing more"
    started.refresh_from_db()
    assert (started.state, started.incarnation) == (OperationState.STARTED, "run-1")


def test_a_second_claim_of_the_same_run_is_told_which_process_claimed_the_attempt(make_operation):
    """Two deliveries of an attempt in one run of the agent (a message sent again): only the
    process whose claim started it runs it, though the answer to that claim was lost."""
    sent = make_operation(OperationState.SENT, agent=AGENT, attempt=1)
    [(_, first)] = intake.take([signed("claim", sent, pid=4242, id="c1")])
    assert first["verdict"] == "run"
    [(_, again), (_, other)] = intake.take([signed("claim", sent, pid=4242, id="c1"),
                                            signed("claim", sent, pid=4343, id="c2")])
    assert (again["verdict"], again["pid"]) == ("started", 4242), "the claimant's own claim, sent again"
    assert (other["verdict"], other["pid"]) == ("started", 4242)


def test_a_claim_of_a_cancelled_execution_is_dropped(make_execution, make_operation):
    sent = make_operation(OperationState.SENT, make_execution(ExecutionStatus.CANCELLING), agent=AGENT, attempt=1)
    [(_, answer)] = intake.take([signed("claim", sent)])
    assert answer["verdict"] == "drop" and "cancelling" in answer["reason"]


def test_a_lost_attempt_is_rescheduled_once_and_a_stale_one_changes_nothing(started):
    intake.take([signed("lost", started, message="its worker process was lost")] * 2)
    started.refresh_from_db()
    assert (started.state, started.error["type"], started.current_retries) == (OperationState.RESCHEDULED, "WorkerLost", 1)


def test_processes_gone_are_recorded_only_for_attempts_sent_to_the_agent_that_says_so(started):
    other = Operation.objects.create(execution=started.execution, name="other", operation="noop", agent="host-2",
                                     state=OperationState.STARTED, attempt=1)
    intake.take([prove({"kind": "gone", "agent": AGENT, "incarnation": "run-1",
                        "attempts": [[str(started.pk), 1], [str(other.pk), 1]]})])
    gone = Event.objects.filter(type=EventType.LOG, data__has_key="processes_gone")
    assert list(gone.values_list("operation", flat=True)) == [started.name]


def test_a_registration_declares_lost_what_earlier_runs_left_started_and_heartbeats_keep_the_current_run(started):
    Agent.objects.create(name=AGENT, incarnation="run-1", last_heartbeat=timezone.now() - timedelta(minutes=5))
    run = {"agent": AGENT, "incarnation": "run-2"}
    intake.take([prove({"kind": "register", **run, "hostname": "box", "pid": 7, "concurrency": 3})])
    agent = Agent.objects.get(name=AGENT)
    assert (agent.incarnation, agent.hostname, agent.pid, agent.concurrency) == ("run-2", "box", 7, 3)
    started.refresh_from_db()
    assert started.state == OperationState.RESCHEDULED and "started again" in started.error["message"]

    long_ago = timezone.now() - timedelta(minutes=5)
    Agent.objects.filter(name=AGENT).update(last_heartbeat=long_ago)
    intake.take([prove({"kind": "heartbeat", "agent": AGENT, "incarnation": "run-1"})])
    assert Agent.objects.get(name=AGENT).last_heartbeat == long_ago, "an earlier run's heartbeat is not this run's"
    intake.take([prove({"kind": "heartbeat", **run})])
    assert Agent.objects.get(name=AGENT).last_heartbeat > long_ago


def incarnation(began_ns):
    return f"{began_ns:016x}.{uuid.uuid4().hex[:15]}"


@pytest.mark.parametrize("kind", ["register", "heartbeat"])
def test_an_unproved_registration_or_heartbeat_changes_nothing(started, kind, caplog):
    """A forged registration would make the current run's started attempt lost: run twice at once."""
    Agent.objects.create(name=AGENT, incarnation="run-1", last_heartbeat=timezone.now())
    fields = {"hostname": "box", "pid": 7, "concurrency": 1} if kind == "register" else {}
    with caplog.at_level(logging.WARNING, logger="agents.intake"):
        intake.take([prove({"kind": kind, "agent": AGENT, "incarnation": "run-2", **fields}, agent="host-2")])
    assert Agent.objects.get(name=AGENT).incarnation == "run-1" and "not proved" in caplog.text
    started.refresh_from_db()
    assert started.state == OperationState.STARTED


def test_a_replayed_registration_of_an_earlier_run_changes_nothing(make_operation, caplog):
    """Proved, but older than the run the agent has: a replay (its report was read off the
    broker) would make what the current run started lost, and run it again beside it."""
    earlier, current = incarnation(10**18), incarnation(10**18 + 1)
    register = {"kind": "register", "agent": AGENT, "hostname": "box", "pid": 7, "concurrency": 1}
    intake.take([prove({**register, "incarnation": earlier})])
    intake.take([prove({**register, "incarnation": current})])
    running = make_operation(OperationState.STARTED, agent=AGENT, attempt=1, incarnation=current,
                             started_at=timezone.now())
    with caplog.at_level(logging.WARNING, logger="agents.intake"):
        intake.take([prove({**register, "incarnation": earlier})])
    assert Agent.objects.get(name=AGENT).incarnation == current
    assert "did not begin after the current one" in caplog.text
    running.refresh_from_db()
    assert running.state == OperationState.STARTED


def test_a_registration_after_a_run_of_an_earlier_version_is_taken(started):
    """Before incarnations began with their time they were 32 hexadecimal digits: no order to tell."""
    Agent.objects.create(name=AGENT, incarnation="f" * 32)
    run = incarnation(1)
    intake.take([prove({"kind": "register", "agent": AGENT, "incarnation": run, "hostname": "box", "pid": 7,
                        "concurrency": 1})])
    assert Agent.objects.get(name=AGENT).incarnation == run


def test_a_report_proved_by_an_agent_the_operation_was_not_sent_to_changes_nothing(started, caplog):
    body = success(started, result="forged", agent="host-2")
    with caplog.at_level(logging.WARNING, logger="agents.intake"):
        intake.take([body])
    started.refresh_from_db()
    assert (started.state, started.result) == (OperationState.STARTED, None)
    assert f"which was sent to {AGENT}: ignored" in caplog.text


def test_the_heartbeat_of_an_agent_with_no_row_registers_it_with_its_host():
    """Its registration found no reports queue yet (a deployment's very first start). Its host is
    where a stop is sent: without it, what the agent holds cannot be stopped, only waited for."""
    intake.take([prove({"kind": "heartbeat", "agent": "newcomer", "incarnation": "run-9", "hostname": "box-9"})])
    agent = Agent.objects.get(name="newcomer")
    assert (agent.incarnation, agent.hostname, agent.status) == ("run-9", "box-9", "online")


def test_a_heartbeat_says_where_its_run_is_only_for_that_run():
    Agent.objects.create(name=AGENT, incarnation="run-2", last_heartbeat=timezone.now())  # no host: registration lost
    intake.take([prove({"kind": "heartbeat", "agent": AGENT, "incarnation": "run-1", "hostname": "old-box"})])
    assert Agent.objects.get(name=AGENT).hostname == "", "an earlier run's host is not this run's"
    intake.take([prove({"kind": "heartbeat", "agent": AGENT, "incarnation": "run-2", "hostname": "box"})])
    assert Agent.objects.get(name=AGENT).hostname == "box"
    intake.take([prove({"kind": "heartbeat", "agent": AGENT, "incarnation": "run-2"})])  # an earlier version's
    assert Agent.objects.get(name=AGENT).hostname == "box"


def test_any_report_of_the_current_run_counts_as_its_heartbeat_but_only_a_heartbeat_makes_a_row(make_operation):
    """A run claims what waits for it before its first heartbeat: the claim says it is alive (the
    managers' sweep takes an agent silent for AGENT_OFFLINE_AFTER_SECONDS for offline, and what
    it started for lost). A report of an earlier run says nothing of the current one, and the
    reports of operations the managers run, under the management queue's name, make no agent."""
    long_ago = timezone.now() - timedelta(minutes=5)
    Agent.objects.create(name=AGENT, incarnation="run-1", last_heartbeat=long_ago)
    sent = make_operation(OperationState.SENT, agent=AGENT, attempt=1)
    intake.take([signed("claim", sent)])
    assert Agent.objects.get(name=AGENT).last_heartbeat > long_ago

    Agent.objects.filter(name=AGENT).update(incarnation="run-2", last_heartbeat=long_ago)
    intake.take([signed("log", sent, message="from the earlier run", data={})])
    assert Agent.objects.get(name=AGENT).last_heartbeat == long_ago, "an earlier run's report is not this run's"

    managers = make_operation(OperationState.SENT, agent="management", attempt=1)
    intake.take([signed("claim", managers, agent="management")])
    assert not Agent.objects.filter(name="management").exists()


@pytest.mark.parametrize("kind", ["claim", "outcome"])
def test_no_report_speaks_for_a_local_step_even_proved_with_the_managers_key(make_operation, kind, caplog):
    """A local step runs in its manager's pass, which records it: a claim or an outcome on the
    wire about it — even proved with the key of the management queue it is filed under — is not
    its own, and changes nothing."""
    manager = "management"
    step = make_operation(OperationState.STARTED, agent=manager, local=True, attempt=1, incarnation="run-1",
                          started_at=timezone.now())
    report = signed(kind, step, agent=manager, **({"outcome": "succeeded", "result": "forged"} if kind == "outcome" else {}))
    with caplog.at_level(logging.WARNING, logger="agents.intake"):
        assert intake.take([report]) == []
    step.refresh_from_db()
    assert (step.state, step.result) == (OperationState.STARTED, None)
    assert "a local step: ignored" in caplog.text
