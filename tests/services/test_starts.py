"""Starting an execution (``services.start``): the execution and its first event are stored
together, and its advance message is sent only once they are committed.

On PostgreSQL a start without a deployment to check is one statement
(``transitions.create_execution``), committed by itself outside a transaction: these tests run
with real commits (``transaction=True``) to see what another connection sees, and when.
"""

import pytest
from django.db import DatabaseError, connection, connections, transaction

from workflows_app import services
from workflows_app.models import Event, Execution
from workflows_app.states import EventType, ExecutionStatus
from workflows_app.transitions import create_execution

pytestmark = pytest.mark.django_db(transaction=True)


def _committed(execution_id):
    """What another connection sees of the execution: (its status, its events' messages)."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(f"SELECT status FROM {Execution._meta.db_table} WHERE id = %s", [execution_id])
            row = cursor.fetchone()
            cursor.execute(f"SELECT message FROM {Event._meta.db_table} WHERE execution_id = %s", [execution_id])
            return (row[0] if row else None), [message for (message,) in cursor.fetchall()]
    finally:
        other.close()


@pytest.mark.postgres
def test_the_advance_is_sent_only_once_the_execution_and_its_event_are_committed(outbox, monkeypatch):
    seen = []
    monkeypatch.setattr(services.broker, "send_advance", lambda pk, workflow_id=None: seen.append(_committed(pk)))
    execution = services.start("demo", {"n": 1})
    assert seen == [("pending", ["created: demo"])], "sent once, after both rows were committed"
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.PENDING


def test_a_start_in_a_transaction_that_rolls_back_stores_and_sends_nothing(outbox):
    with pytest.raises(RuntimeError), transaction.atomic():
        services.start("demo", {"n": 1})
        raise RuntimeError("the caller changed its mind")
    assert not Execution.objects.exists() and not Event.objects.exists()
    assert outbox["advance"] == []


def test_a_start_in_a_callers_transaction_is_sent_when_that_commits(outbox):
    with transaction.atomic():
        first = services.start("demo", {"n": 1})
        second = services.start("demo", {"n": 2})
        assert outbox["advance"] == [], "nothing is sent before the caller's commit"
    assert outbox["advance"] == [str(first.pk), str(second.pk)]
    assert Event.objects.filter(execution_id__in=[first.pk, second.pk]).count() == 2


@pytest.mark.postgres
def test_an_event_the_database_refuses_leaves_no_execution_behind():
    execution = Execution(workflow_id="demo", parameters={})
    refused = Event(type=EventType.LOG, message="created: demo", data={}, operation="x" * 300)  # longer than 255
    with pytest.raises(DatabaseError):
        create_execution(execution, refused)
    assert not Execution.objects.exists() and not Event.objects.exists()


def test_the_stored_execution_and_event_are_what_the_instances_say():
    execution = Execution(workflow_id="demo", parameters={"n": 3}, deployment_id="dep", timeout=5.0,
                          created_by="alice")
    event = Event(type=EventType.LOG, message="created: demo", data={"parameters": {"n": 3}})
    assert create_execution(execution, event) is execution
    stored = Execution.objects.get(pk=execution.pk)
    assert (stored.workflow_id, stored.parameters, stored.deployment_id, stored.timeout, stored.created_by,
            stored.status, stored.created_at) == (
        "demo", {"n": 3}, "dep", 5.0, "alice", ExecutionStatus.PENDING, execution.created_at)
    assert Event.objects.get(pk=event.pk).execution_id == execution.pk == event.execution_id
    assert event.timestamp is not None and not execution._state.adding
    execution.error = "saved again"
    execution.save(update_fields=["error"])  # an UPDATE of the stored row: it knows it is stored
    assert Execution.objects.get(pk=execution.pk).error == "saved again"


@pytest.mark.postgres
def test_a_start_outside_a_transaction_is_one_statement(outbox, django_assert_num_queries):
    with django_assert_num_queries(1):
        services.start("demo", {"n": 1})
    assert connection.get_autocommit(), "no transaction is left open"
