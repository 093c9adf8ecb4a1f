"""How an attempt's Celery task ends, as Celery's own worker code sees it: the state that its
events (and so Flower) show — ``SUCCESS``, ``RETRY`` or ``FAILURE`` — with the message
acknowledged, one log line and no result stored.

Each test sends an attempt's message with the engine's own ``broker.send_operations`` to a
queue of its own on the real broker, takes it from there as a worker does and hands it to
Celery's worker ``Request``, which runs it as a pool does (``execute_using_pool``, Celery's
inline ``apply_target``): the events it sends, its acknowledgement or rejection of the real
message and the log are Celery's. The runner's reports reach the managers' intake in this
process (the ``agent_link`` fixture)."""

import logging
import uuid

import pytest
from celery import current_app
from celery.concurrency.base import BasePool, apply_target
from celery.worker.request import Request
from kombu import Exchange, Queue

from agents.runner import AttemptFailed
from agents.worker import link, local
from workflows_app import broker, wire
from workflows_app.broker import RUNNER_TASK
from workflows_app.errors import NonRecoverableError, OperationCancelled, RecoverableError
from workflows_app.models.operation import task_id_for
from workflows_app.registry import operation
from workflows_app.states import OperationState

PROBE = "test_runner_states_probe"


@operation(name=PROBE, max_retries=0)
def probe(ctx, how):
    if how == "recoverable":
        raise RecoverableError("the service is busy\nretry later")
    if how == "nonrecoverable":
        raise NonRecoverableError("card declined for 42")
    if how == "cancelled":
        raise OperationCancelled("the execution is being cancelled")
    if how == "cancel-noted":
        # What a manager's cancel request does on this worker while the attempt runs.
        assert local.request_cancel([local.attempt_key(ctx.operation_id, ctx.attempt)])
        raise RecoverableError("stopped half-way")
    return how


class Events:
    """The worker's event dispatcher as a ``Request`` uses it: what it sends, in order."""

    enabled = True

    def __init__(self):
        self.sent = []

    def send(self, type, **fields):
        self.sent.append((type, fields))

    def last(self, *types):
        return [(t, f) for t, f in self.sent if t in types][-1]


class InlinePool(BasePool):
    """Celery's solo pool (tasks applied inline by ``apply_target``), without the
    ``worker_process_init`` signal it sends when made: that one is for a worker's processes."""

    def __init__(self):
        super().__init__(limit=1)
        self.on_apply = apply_target


@pytest.fixture
def queue(agent_link, monkeypatch, tmp_path):
    """A queue of this test's own on the real broker (the agent's name), deleted afterwards."""
    name = f"test-states-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("SWITCHYARD_VAR_DIR", str(tmp_path / "var"))  # the agent's records of what runs
    monkeypatch.setenv(local.NAME_ENV, name)
    monkeypatch.setattr(broker, "send_advance", lambda pk, workflow_id=None: None)
    yield name
    with current_app.connection_for_write() as connection:
        connection.default_channel.queue_delete(queue=name)


class Delivered:
    """One message of ``queue`` run by Celery's worker ``Request``: its events, how it was
    settled with the broker (``acked``, ``rejected``: requeue flags) and its task id."""

    def __init__(self, queue):
        self.acked, self.rejected, self.events = 0, [], Events()
        with current_app.connection_for_write() as connection:
            message = Queue(queue, Exchange(queue, "direct"), routing_key=queue)(connection.default_channel).get(no_ack=False)
            assert message is not None, f"no message in {queue}"

            def ack(logger, errors):
                message.ack()
                self.acked += 1

            def reject(logger, errors, requeue=False):
                message.reject(requeue=requeue)
                self.rejected.append(requeue)

            request = Request(message, on_ack=ack, on_reject=reject, app=current_app, eventer=self.events,
                              hostname=f"{queue}@here", task=current_app.tasks[RUNNER_TASK], connection_errors=())
            self.task_id = request.id
            request.execute_using_pool(InlinePool())

    @property
    def state_events(self):
        return [t for t, _ in self.events.sent if t != "task-started"]


def send(make_execution, make_operation, queue, how, *, execution=None, **fields):
    """An operation of PROBE, its attempt 1 sent to ``queue``."""
    fields.setdefault("state", OperationState.SENT)
    fields.setdefault("attempt", 1)
    op = make_operation(execution=execution or make_execution(), operation=PROBE, args=[how], agent=queue, **fields)
    broker.send_operations([op])
    return op


def waiting(queue) -> int:
    """How many messages wait in ``queue`` (declared as the engine declares it, so an empty one counts 0 on Redis too)."""
    with current_app.connection_for_read() as connection:
        return connection.default_channel.queue_declare(queue=queue, durable=True, auto_delete=False).message_count


def stored_result(task_id):
    """What the result backend holds for ``task_id``; None without one (the results are in the database)."""
    backend = current_app.backend
    if not hasattr(backend, "get_key_for_task"):  # no result backend (Celery's DisabledBackend)
        return None
    return backend.get(backend.get_key_for_task(task_id))


def outcomes(agent_link):
    return [r for r in agent_link.reports if r["kind"] in (wire.Kind.OUTCOME, wire.Kind.LOST)]


def assert_quiet(caplog):
    """The worker's log of an ordinary outcome: no warning, no error, no traceback."""
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]


@pytest.fixture(autouse=True)
def log(caplog):
    caplog.set_level(logging.INFO)
    return caplog


def test_a_succeeded_attempt_is_success(transactional_db, agent_link, queue, make_execution, make_operation, caplog):
    op = send(make_execution, make_operation, queue, "fine")
    run = Delivered(queue)
    assert run.task_id == task_id_for(op.pk, 1)
    assert run.state_events == ["task-succeeded"] and (run.acked, run.rejected) == (1, [])
    op.refresh_from_db()
    assert op.state == OperationState.SUCCEEDED and op.result == "fine"
    assert stored_result(run.task_id) is None, "no result in the result backend"
    assert waiting(queue) == 0
    assert_quiet(caplog)


def test_a_failed_attempt_is_failure_with_its_error_on_one_line(transactional_db, agent_link, queue, make_execution,
                                                                   make_operation, caplog):
    op = send(make_execution, make_operation, queue, "nonrecoverable", max_retries=3)
    run = Delivered(queue)
    assert run.state_events == ["task-failed"] and (run.acked, run.rejected) == (1, [])
    _, failed = run.events.last("task-failed")
    assert failed["exception"] == repr(AttemptFailed("NonRecoverableError: card declined for 42"))
    op.refresh_from_db()
    assert op.state == OperationState.FAILED and op.error["type"] == "NonRecoverableError"
    assert [r["outcome"] for r in outcomes(agent_link)] == ["failed"], "reported once, before the task ended"
    assert stored_result(run.task_id) is None
    assert waiting(queue) == 0, "acknowledged, not given back"
    assert_quiet(caplog)
    assert f"[{run.task_id}] raised expected: AttemptFailed('NonRecoverableError: card declined for 42')" in caplog.text


def test_a_retried_attempt_is_retry_and_celery_sends_no_message_for_it(transactional_db, agent_link, queue,
                                                                          make_execution, make_operation, caplog):
    op = send(make_execution, make_operation, queue, "recoverable", max_retries=3, current_retries=1)
    run = Delivered(queue)
    assert run.state_events == ["task-retried"] and (run.acked, run.rejected) == (1, [])
    _, retried = run.events.last("task-retried")
    # Its error on one line: the message's line break is not carried into the event.
    # (In a prefork pool's event the exception is this one; inline, Celery wraps it in its Retry's repr.)
    assert repr(AttemptFailed("RecoverableError: the service is busy retry later")) in retried["exception"]
    op.refresh_from_db()
    assert (op.state, op.current_retries, op.attempt) == (OperationState.RESCHEDULED, 2, 1)
    assert waiting(queue) == 0, "the next attempt is the engine's to send, not Celery's"
    assert stored_result(run.task_id) is None
    assert_quiet(caplog)
    assert f"[{run.task_id}] retry: retried as attempt 2: RecoverableError: the service is busy retry later" in caplog.text


def test_an_operation_without_a_retry_limit_is_retry(transactional_db, agent_link, queue, make_execution, make_operation):
    op = send(make_execution, make_operation, queue, "recoverable", max_retries=-1, current_retries=40)
    assert Delivered(queue).state_events == ["task-retried"]
    op.refresh_from_db()
    assert op.state == OperationState.RESCHEDULED


def test_a_retryable_failure_with_no_retry_left_is_failure(transactional_db, agent_link, queue, make_execution,
                                                             make_operation):
    op = send(make_execution, make_operation, queue, "recoverable", max_retries=2, current_retries=2)
    run = Delivered(queue)
    assert run.state_events == ["task-failed"] and (run.acked, run.rejected) == (1, [])
    op.refresh_from_db()
    assert op.state == OperationState.FAILED, "what the task said is what the managers did"


def test_a_retryable_failure_while_a_cancel_is_noted_is_failure(transactional_db, agent_link, queue, make_execution,
                                                                 make_operation):
    """A cancelling execution takes no new call: a manager asked this worker to cancel it."""
    send(make_execution, make_operation, queue, "cancel-noted", max_retries=3)
    assert Delivered(queue).state_events == ["task-failed"]


def test_a_cancelled_attempt_is_failure_saying_cancelled(transactional_db, agent_link, queue, make_execution,
                                                          make_operation):
    op = send(make_execution, make_operation, queue, "cancelled", max_retries=3)
    run = Delivered(queue)
    assert run.state_events == ["task-failed"] and run.acked == 1
    assert run.events.last("task-failed")[1]["exception"].startswith(
        "AttemptCancelled('cancelled: OperationCancelled: the execution is being cancelled")
    op.refresh_from_db()
    assert op.state == OperationState.CANCELLED


def test_a_dry_run_and_a_dropped_delivery_are_success(transactional_db, agent_link, queue, make_execution, make_operation):
    """Nothing failed: a dry run succeeds without running, and a delivery of a superseded attempt
    runs nothing (a duplicate is not the operation's failure)."""
    dry = send(make_execution, make_operation, queue, "nonrecoverable", execution=make_execution(is_dry_run=True))
    assert Delivered(queue).state_events == ["task-succeeded"]
    dry.refresh_from_db()
    assert dry.state == OperationState.SUCCEEDED

    superseded = make_operation(OperationState.SENT, make_execution(), operation=PROBE, args=["nonrecoverable"],
                                agent=queue, attempt=2)
    superseded.attempt = 1  # a message of attempt 1, sent before attempt 2 was
    broker.send_operations([superseded])
    run = Delivered(queue)
    assert run.task_id == task_id_for(superseded.pk, 1)
    assert run.state_events == ["task-succeeded"] and run.acked == 1
    superseded.refresh_from_db()
    assert (superseded.state, superseded.attempt) == (OperationState.SENT, 2)
    assert [r["operation"] for r in outcomes(agent_link)] == [str(dry.pk)], "the dropped delivery reported nothing"


def test_the_redelivery_of_an_attempt_whose_process_died_is_retry(transactional_db, agent_link, queue, make_execution,
                                                                   make_operation):
    op = send(make_execution, make_operation, queue, "fine", state=OperationState.STARTED, incarnation=local.incarnation(),
              max_retries=3)
    # The record its first delivery left in a pool process that died (this process' own group).
    local.mark_running(local.attempt_key(op.pk, 1))
    run = Delivered(queue)
    assert run.state_events == ["task-retried"] and run.acked == 1
    assert [(r["kind"], r["message"]) for r in outcomes(agent_link)] == [("lost", "its worker process was lost")]
    op.refresh_from_db()
    assert op.state == OperationState.RESCHEDULED


def test_an_outcome_the_broker_did_not_take_sends_the_message_back(transactional_db, agent_link, queue, make_execution,
                                                                   make_operation, monkeypatch):
    send(make_execution, make_operation, queue, "nonrecoverable")
    report = agent_link.report

    def unreachable(kind, **fields):
        if kind == wire.Kind.OUTCOME:
            raise link.Unreachable("the broker is gone")
        return report(kind, **fields)

    monkeypatch.setattr(agent_link, "report", unreachable)
    run = Delivered(queue)
    assert run.state_events == ["task-rejected"] and (run.acked, run.rejected) == (0, [True])
    assert waiting(queue) == 1, "back in its queue, for its next delivery"
