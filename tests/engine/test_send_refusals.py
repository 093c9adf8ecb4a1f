"""What gets past the doors of agent names (``test_agent_name_doors.py``) is still never sent to
a name that cannot be one, and a message the broker refuses fails its operation for good rather
than leaving it ``sending`` for ever — refused again at every sweep for lost messages, which the
refusal stopped: a row stored before the name was checked is not sent; a queue the broker
refuses (on the real broker: a Redis key of another type, a RabbitMQ queue declared with other
arguments) fails that operation while the others are sent; a broker that cannot be reached
refuses nothing."""

import uuid
from datetime import timedelta

import kombu
import pytest
from celery import current_app
from django.utils import timezone

from workflows_app import broker
from workflows_app.engine import progress, tick
from workflows_app.models import Event, Operation
from workflows_app.states import ExecutionStatus, OperationState


def sending(make_execution, make_operation, *agents):
    """One started execution with an operation in ``sending`` (attempt 1) on each of ``agents``,
    sent more than RESEND_AFTER_SECONDS ago: what the tick's sweep sends again."""
    execution = make_execution(status=ExecutionStatus.STARTED)
    ops = [make_operation(OperationState.SENDING, execution, name=f"on-{i}", agent=agent, attempt=1, max_retries=3)
           for i, agent in enumerate(agents)]
    Operation.objects.filter(execution=execution).update(
        sending_at=timezone.now() - timedelta(seconds=tick.RESEND_AFTER_SECONDS + 5))
    return execution, ops


def test_a_row_stored_before_the_name_was_checked_is_not_sent_it_fails(
        make_execution, make_operation, outbox, django_capture_on_commit_callbacks):
    execution, (bad, good) = sending(make_execution, make_operation, "celery.pidbox", "management")
    with django_capture_on_commit_callbacks(execute=True):
        progress.publish([bad, good])
    assert outbox["operation"] == [good.name]
    good.refresh_from_db()
    bad.refresh_from_db()
    assert good.state == OperationState.SENT
    assert bad.state == OperationState.FAILED and bad.current_retries == 0, "failed for good, not retried"
    assert bad.error["type"] == progress.SEND_REFUSED
    assert bad.error["message"].startswith("not sent: invalid agent name 'celery.pidbox': Celery's own")
    assert Event.objects.filter(execution=execution, operation=bad.name, type="task_failed").count() == 1
    assert outbox["advance"] == [str(execution.pk)], "the execution is woken to see the failure"


@pytest.fixture
def refusing_queue():
    """The name of a queue the configured broker refuses to take an operation's message into, as
    it does when the name was taken by something else first: on Redis a key that holds a string
    (WRONGTYPE), on RabbitMQ a queue declared with other arguments than Celery declares (not
    durable: PRECONDITION_FAILED). Both are deleted afterwards."""
    name = f"refusing-{uuid.uuid4().hex[:8]}"
    with current_app.connection_for_write() as connection:
        if broker.broker_is_redis():
            with connection.default_channel.conn_or_acquire() as client:
                client.set(name, "taken by something else")
        else:
            kombu.Queue(name, kombu.Exchange(name, "direct", durable=False), routing_key=name, durable=False,
                        auto_delete=False)(connection.default_channel).declare()
    yield name
    with current_app.connection_for_write() as connection:
        if broker.broker_is_redis():
            with connection.default_channel.conn_or_acquire() as client:
                client.delete(name)
        else:
            connection.default_channel.queue_delete(name)
            connection.default_channel.exchange_delete(name)


@pytest.fixture
def taking_queue():
    """The name of an agent's queue that takes messages; what it holds is deleted afterwards."""
    name = f"taking-{uuid.uuid4().hex[:8]}"
    yield name
    with current_app.connection_for_write() as connection:
        channel = connection.channel()
        try:
            channel.queue_delete(name)
            if not broker.broker_is_redis():
                channel.exchange_delete(name)
        finally:
            channel.close()


def test_a_message_the_broker_refuses_fails_its_operation_and_the_others_are_still_sent(
        make_execution, make_operation, refusing_queue, taking_queue, monkeypatch, django_capture_on_commit_callbacks):
    woken = []
    monkeypatch.setattr(broker, "send_advance", lambda pk, workflow_id=None: woken.append(str(pk)))
    execution, (first, refused, last) = sending(make_execution, make_operation, taking_queue, refusing_queue,
                                                taking_queue)
    with django_capture_on_commit_callbacks(execute=True):
        progress.publish([first, refused, last])
    for op in (first, refused, last):
        op.refresh_from_db()
    assert (first.state, refused.state, last.state) == (OperationState.SENT, OperationState.FAILED, OperationState.SENT)
    assert refused.error["type"] == progress.SEND_REFUSED and refused.current_retries == 0
    message = refused.error["message"]
    assert message.startswith(f"the broker refused the message to agent {refusing_queue!r}: ")
    assert ("WRONGTYPE" if broker.broker_is_redis() else "PRECONDITION_FAILED") in message
    assert woken == [str(execution.pk)]
    assert broker.purge(taking_queue) == 2, "the messages before and after the refused one went out"


def test_the_sweep_for_lost_messages_fails_a_refused_one_and_sends_the_others_again(
        make_execution, make_operation, refusing_queue, taking_queue, monkeypatch, django_capture_on_commit_callbacks):
    """What a manager's tick met before: the refused send raised, the sweep stopped there, and the
    operation stayed ``sending`` to be refused again at every sweep."""
    monkeypatch.setattr(broker, "send_advance", lambda pk, workflow_id=None: None)
    monkeypatch.setattr(broker, "waiting_messages", lambda queue: 0)
    _, (refused, lost) = sending(make_execution, make_operation, refusing_queue, taking_queue)
    with django_capture_on_commit_callbacks(execute=True):
        tick.resend_stuck_messages(timezone.now())
    refused.refresh_from_db()
    lost.refresh_from_db()
    assert (refused.state, lost.state) == (OperationState.FAILED, OperationState.SENT)
    assert broker.purge(taking_queue) == 1


def test_a_broker_that_cannot_be_reached_leaves_the_operations_sending_to_be_sent_again(
        make_execution, make_operation, monkeypatch):
    from kombu.exceptions import OperationalError

    def down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.") from ConnectionRefusedError(111)

    monkeypatch.setattr(current_app, "send_task", down)
    _, (op,) = sending(make_execution, make_operation, "host-1")
    with pytest.raises(OperationalError):
        progress.publish([op])
    op.refresh_from_db()
    assert op.state == OperationState.SENDING


@pytest.mark.parametrize("exc, refused", [
    (ConnectionRefusedError(111, "Connection refused"), False),
    (OSError("Network is unreachable"), False),
    (TimeoutError("timed out"), False),
])
def test_only_a_refusal_of_that_queue_is_taken_for_one(exc, refused):
    assert (broker.refusal(exc, "host-1") is not None) == refused


def test_what_rabbitmq_and_redis_answer_is_read_as_a_refusal_of_the_queue_it_names():
    import amqp.exceptions
    import redis.exceptions
    from kombu.exceptions import OperationalError

    declare = (50, 10)  # Queue.declare
    precondition = amqp.exceptions.PreconditionFailed(
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'host-1' in vhost '/': received 'true' but "
        "current is 'false'",
        declare, reply_code=406)
    assert "PRECONDITION_FAILED" in broker.refusal(precondition, "host-1")
    assert broker.refusal(precondition, "host-2") is None, "about another queue"
    login = amqp.exceptions.AccessRefused("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN",
                                          (10, 11), reply_code=403)
    assert broker.refusal(login, "host-1") is None, "the broker's refusal of the connection: no queue's"
    wrapped = OperationalError("Command # 1 (LLEN host-1) of pipeline caused error: WRONGTYPE Operation against a key")
    wrapped.__cause__ = redis.exceptions.ResponseError("Command # 1 (LLEN host-1) of pipeline caused error: WRONGTYPE "
                                                       "Operation against a key holding the wrong kind of value")
    assert "WRONGTYPE" in broker.refusal(wrapped, "host-1")
    full = redis.exceptions.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
    assert broker.refusal(full, "host-1") is None, "a full Redis may take it later"
    assert broker.refusal(redis.exceptions.ConnectionError("Connection reset by peer"), "host-1") is None
