"""Carrying on after a restart: reconciling ``started`` operations with the workers'
answers, on the database alone (which are awaited and which are lost); what is sent again, on
the real broker. The processes' side is in tests/integration/test_restart.py."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from kombu import Exchange, Queue
from kombu.exceptions import OperationalError as BrokerError

from agents.worker import lifecycle, link, manager
from agents.worker.local import attempt_key
from agents.models import Agent
from switchyard.celery import app
from workflows_app import broker, wire
from workflows_app.models import Event, Operation
from workflows_app.states import ExecutionStatus, OperationState


def started(make_execution, make_operation, **ops):
    execution = make_execution(status=ExecutionStatus.STARTED)
    made = {name: make_operation(OperationState.STARTED, execution, name=name, attempt=1, max_retries=3, **fields)
            for name, fields in ops.items()}
    return execution, made


def state(op):
    op.refresh_from_db()
    return op.state


def test_an_attempt_its_worker_still_runs_is_awaited_and_one_it_does_not_is_lost(make_execution, make_operation):
    _, ops = started(make_execution, make_operation,
                     running={"agent": "a", "incarnation": "inc-a"}, gone={"agent": "a", "incarnation": "inc-a"})
    answers = {("a", "inc-a"): {attempt_key(ops["running"].pk, 1)}}
    assert manager.reconcile_started(list(ops.values()), answers) == 1
    assert state(ops["running"]) == "started"
    assert state(ops["gone"]) == "rescheduled"
    assert ops["gone"].error["message"].startswith("lost during restart")
    assert ops["gone"].current_retries == 1, "a retryable failure"


def test_an_answer_counts_for_its_own_agent_only(make_execution, make_operation):
    """An agent (its own key) answering for another agent's run that it runs nothing would make
    that run's attempts lost, and run again beside it."""
    Agent.objects.create(name="a", incarnation="inc-a", last_heartbeat=timezone.now())
    _, ops = started(make_execution, make_operation, running={"agent": "a", "incarnation": "inc-a"})
    assert manager.reconcile_started(list(ops.values()), answers={("b", "inc-a"): set()}) == 0
    assert state(ops["running"]) == "started"


def test_a_worker_that_did_not_answer_is_trusted_while_its_agent_heart_beats(make_execution, make_operation):
    Agent.objects.create(name="alive", incarnation="inc-now", last_heartbeat=timezone.now())
    Agent.objects.create(name="restarted", incarnation="inc-new", last_heartbeat=timezone.now())
    _, ops = started(make_execution, make_operation,
                     quiet={"agent": "alive", "incarnation": "inc-now"},
                     earlier_run={"agent": "restarted", "incarnation": "inc-old"},
                     on_a_dead_manager={"agent": "management", "incarnation": "inc-manager"})
    assert manager.reconcile_started(list(ops.values()), answers={}) == 2
    assert (state(ops["quiet"]), state(ops["earlier_run"]), state(ops["on_a_dead_manager"])) == (
        "started", "rescheduled", "rescheduled")


def test_an_operation_that_reported_meanwhile_is_left_as_it_reported(make_execution, make_operation):
    execution, ops = started(make_execution, make_operation, done={"agent": "a", "incarnation": "inc-a"})
    snapshot = list(ops.values())
    Operation.objects.filter(pk=ops["done"].pk).update(state=OperationState.SUCCEEDED)  # test set-up: it reported
    assert manager.reconcile_started(snapshot, answers={("a", "inc-a"): set()}) == 0
    assert state(ops["done"]) == "succeeded"
    assert not Event.objects.filter(execution_id=execution.pk, type="stale_report").exists()


def test_a_lost_operation_out_of_retries_fails(make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.STARTED)
    op = make_operation(OperationState.STARTED, execution, name="last", attempt=4, max_retries=3, current_retries=3,
                        agent="a", incarnation="inc-a")
    assert manager.reconcile_started([op], answers={}) == 1
    assert state(op) == "failed"


# --- lost wake-ups against a backlog (the tick's sweep) ----------------------------------


@pytest.fixture
def management_queue(settings):
    """A management queue of this test's own on the real broker, emptied afterwards."""
    from switchyard.celery import app

    name = f"test-mgmt-{uuid.uuid4().hex[:8]}"
    settings.WORKFLOWS = {**getattr(settings, "WORKFLOWS", {}), "MANAGEMENT_QUEUE": name}
    yield name
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        channel.queue_declare(queue=name, passive=False, durable=True, auto_delete=False)
        channel.queue_delete(queue=name)


def _stale_pending(make_execution, count):
    executions = [make_execution(status=ExecutionStatus.PENDING) for _ in range(count)]
    from workflows_app.models import Execution

    Execution.objects.filter(pk__in=[e.pk for e in executions]).update(created_at=timezone.now() - timedelta(minutes=5))
    return executions


def test_a_backlog_of_start_messages_is_not_sent_again_but_a_lost_one_is(make_execution, management_queue):
    from workflows_app import broker
    from workflows_app.engine import tick

    executions = _stale_pending(make_execution, 3)
    for execution in executions:  # their start messages wait in the queue: a backlog, not a loss
        broker.send_advance(execution.pk)
    assert broker.waiting_messages(management_queue) == 3
    tick.resend_stuck_messages(timezone.now())
    assert broker.waiting_messages(management_queue) == 3, "a queued wake-up was sent twice"

    _stale_pending(make_execution, 1)  # 4 executions to wake, 3 messages: one was lost
    tick.resend_stuck_messages(timezone.now())
    assert broker.waiting_messages(management_queue) == 3 + 4


@pytest.fixture
def agent_queues():
    """Two agents' queues of this test's own on the real broker, deleted afterwards."""
    names = [f"test-agent-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    yield names
    with app.connection_for_write() as connection:
        for name in names:
            connection.default_channel.queue_delete(queue=name)


def _die_holding(queue):
    """Take the message waiting in ``queue`` and go away without acknowledging it or giving it
    back, as a worker SIGKILLed between taking a message and running it does."""
    connection = app.connection_for_write()
    channel = connection.default_channel
    assert Queue(queue, Exchange(queue, "direct"), routing_key=queue)(channel).get(no_ack=False) is not None
    channel.qos.restore_at_shutdown = False
    connection.close()


@pytest.mark.skipif(not broker.broker_is_redis(),
                    reason="Redis holds a dead consumer's messages until its visibility timeout; RabbitMQ gives them back itself")
def test_an_agent_that_starts_again_gets_back_the_messages_its_earlier_run_died_holding(agent_queues, db, monkeypatch):
    mine, other = agent_queues
    for queue in (mine, other):
        app.send_task("agents.run_operation", args=[str(uuid.uuid4()), 1], queue=queue, ignore_result=True)
        _die_holding(queue)
    assert not broker.waiting_messages(mine) and not broker.waiting_messages(other)

    monkeypatch.setattr(link, "report", lambda kind, **fields: None)
    lifecycle._register(mine, 2)
    assert broker.waiting_messages(mine) == 1, "given back to its queue"
    assert not broker.waiting_messages(other), "another agent's is left where it is"
    assert broker.give_back_held(other) == 1


def test_an_agent_starts_when_the_broker_cannot_give_back_what_its_earlier_run_held(monkeypatch, caplog, db):
    def unreachable(queue):
        raise BrokerError("Error 111 connecting to the broker")

    monkeypatch.setattr(broker, "give_back_held", unreachable)
    reported = []
    monkeypatch.setattr(link, "report", lambda kind, **fields: reported.append((kind, fields)))
    lifecycle._register("an-agent", 2)
    assert [kind for kind, _ in reported] == [wire.Kind.REGISTER], "its run is registered all the same"
    assert reported[0][1]["concurrency"] == 2
    assert "could not give back the messages its earlier run held" in caplog.text
