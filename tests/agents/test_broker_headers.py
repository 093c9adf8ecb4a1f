"""The names Switchyard's messages carry for Flower: Celery's ``shadow``,
``argsrepr`` and ``kwargsrepr`` headers, built by ``workflows_app.broker`` — and the message
args the workers read, unchanged. ``tests/integration/test_flower.py`` checks them in a real
Flower."""

import ast
import uuid
from contextlib import contextmanager

import kombu
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.runner import run_operation
from switchyard.celery import app as celery_app
from workflows_app import broker, signing
from workflows_app.engine import progress
from workflows_app.models import Execution, Operation
from workflows_app.models.operation import task_id_for
from workflows_app.states import OperationState
from workflows_app.tasks import advance
from workflows_app.wire import keys

EXECUTION_ID = uuid.UUID("0b6f4f53-5a1e-4c47-9a43-2f0c1c6f1a10")


def an_operation(name="create_vm", operation="create_vm", attempt=1):
    return Operation(id=uuid.uuid4(), execution_id=EXECUTION_ID, name=name, operation=operation, attempt=attempt)


# --- the headers ----------------------------------------------------------------------------

def test_an_operation_is_named_by_workflow_step_and_operation():
    headers = broker.operation_headers("install", an_operation("vm", "create_vm", attempt=2))
    assert headers["shadow"] == "install › vm (create_vm)"
    assert headers["argsrepr"] == f"(execution='{EXECUTION_ID}', step='vm', attempt=2)"
    assert ast.literal_eval(headers["kwargsrepr"]) == {
        "workflow": "install", "execution": str(EXECUTION_ID), "step": "vm", "operation": "create_vm"}


def test_every_attempt_of_a_step_has_the_same_name():
    """Flower's task-name filter then lists a step's retries together; the attempt is in the args."""
    first = broker.operation_headers("install", an_operation(attempt=1))
    third = broker.operation_headers("install", an_operation(attempt=3))
    assert first["shadow"] == third["shadow"]
    assert "attempt=1" in first["argsrepr"] and "attempt=3" in third["argsrepr"]


def test_step_names_with_quotes_stay_a_readable_literal():
    headers = broker.operation_headers("it's", an_operation(name='say "hi"', operation="echo"))
    assert headers["shadow"] == "it's › say \"hi\" (echo)"
    assert ast.literal_eval(headers["kwargsrepr"])["step"] == 'say "hi"'
    assert "step='say \"hi\"'," in headers["argsrepr"]


def test_an_operation_of_an_unknown_workflow_is_named_by_its_step():
    headers = broker.operation_headers(None, an_operation("c00", "it_add"))
    assert headers["shadow"] == "c00 (it_add)"
    assert "workflow" not in ast.literal_eval(headers["kwargsrepr"])


def test_advance_names_its_execution_and_workflow():
    headers = broker.advance_headers(EXECUTION_ID, "install")
    assert headers["shadow"] == "advance › install"
    assert headers["argsrepr"] == f"(execution='{EXECUTION_ID}')"
    assert ast.literal_eval(headers["kwargsrepr"]) == {"workflow": "install", "execution": str(EXECUTION_ID)}


def test_advance_without_a_workflow_keeps_celerys_task_name():
    headers = broker.advance_headers(str(EXECUTION_ID))
    assert "shadow" not in headers
    assert ast.literal_eval(headers["kwargsrepr"]) == {"execution": str(EXECUTION_ID)}


# --- the messages sent ------------------------------------------------------------------------

class RecordingApp:
    """Stands in for the Celery app: records what ``send_task`` was given."""

    def __init__(self):
        self.sent = []
        self.conf = celery_app.conf  # the broker it would send to
        self.events = self  # app.events.Dispatcher(...): this app, recording what it publishes
        self.published = []
        self.current_worker_task = None  # not inside a task

    def Dispatcher(self, enabled=True, serializer=None):
        return self

    def publish(self, type, fields, producer, **kwargs):
        self.published.append({"type": type, **fields})

    @contextmanager
    def producer_or_acquire(self, producer=None):
        yield object()

    def send_task(self, name, **options):
        self.sent.append({"name": name, **options})


class Overriding:
    """A Celery configuration with some settings of its own."""

    def __init__(self, conf, **settings):
        self.conf, self.settings = conf, settings

    def __getattr__(self, name):
        return self.settings[name] if name in self.settings else getattr(self.conf, name)


@pytest.fixture
def app(monkeypatch):
    recording = RecordingApp()
    monkeypatch.setattr(broker, "current_app", recording)
    return recording


def test_operation_messages_keep_their_args_and_carry_the_names(app, make_execution, make_operation):
    execution = make_execution(workflow_id="install")
    op = make_operation(OperationState.SENDING, execution, name="vm", operation="create_vm", attempt=1)
    broker.send_operations([Operation.objects.get(pk=op.pk)])
    [message] = app.sent
    assert message["name"] == broker.RUNNER_TASK
    assert message["args"] == [str(op.pk), 1]
    assert message["task_id"] == f"{op.pk}.1"
    assert message["shadow"] == "install › vm (create_vm)"
    assert ast.literal_eval(message["kwargsrepr"])["execution"] == str(execution.pk)


def test_each_operation_carries_its_executions_priority(app, make_execution, make_operation):
    ops = [make_operation(OperationState.SENDING, make_execution(priority=priority), name=f"p{priority}", attempt=1)
           for priority in (-100, 0, 100)]
    broker.send_operations(Operation.objects.filter(pk__in=[op.pk for op in ops]))
    sent = {m["shadow"].split(" › ")[1].split(" ")[0]: m["priority"] for m in app.sent}
    redis = broker.broker_is_redis()
    assert sent == {f"p{p}": broker.message_priority(p, redis=redis) for p in (-100, 0, 100)}
    # First to be taken: the highest; on Redis the lowest number, on RabbitMQ the highest.
    first = min(sent, key=sent.get) if redis else max(sent, key=sent.get)
    assert first == "p100" and len(set(sent.values())) == 3


def test_each_operation_is_named_after_its_own_executions_workflow(app, make_execution, make_operation):
    ops = [make_operation(OperationState.SENDING, make_execution(workflow_id=workflow), name=f"s-{workflow}", attempt=1)
           for workflow in ("install", "uninstall", "install")]
    broker.send_operations(Operation.objects.filter(pk__in=[op.pk for op in ops]))
    assert sorted(m["shadow"] for m in app.sent) == [
        "install › s-install (noop)", "install › s-install (noop)", "uninstall › s-uninstall (noop)"]


def _execution_reads(operations):
    """The statements that read the execution table while ``operations`` are sent, and all of them."""
    with CaptureQueriesContext(connection) as queries:
        broker.send_operations(operations)
    statements = [q["sql"] for q in queries]
    table = f'FROM "{Execution._meta.db_table}"'
    return [sql for sql in statements if sql.lstrip().upper().startswith("SELECT") and table in sql], statements


def test_naming_costs_one_query_per_batch_not_one_per_operation(app, make_execution, make_operation):
    signing.agent_key("management")  # the agent's key: read once, then kept a few seconds

    def loaded(n):
        ops = [make_operation(OperationState.SENDING, make_execution(workflow_id=f"wf{i}"), attempt=1) for i in range(n)]
        return list(Operation.objects.filter(pk__in=[op.pk for op in ops]))

    (_, few), (reads, many) = _execution_reads(loaded(2)), _execution_reads(loaded(12))
    assert len(few) == len(many) and len(reads) == 1
    assert len(app.sent) == 14 and all(m["shadow"].startswith("wf") for m in app.sent)


def test_operations_holding_their_execution_are_named_without_a_query(app, make_execution, make_operation):
    execution = make_execution(workflow_id="install")
    ops = [make_operation(OperationState.SENDING, execution, attempt=1) for _ in range(3)]
    for op in ops:
        op.execution = execution
    reads, _ = _execution_reads(ops)
    assert reads == []
    assert {m["shadow"].split(" › ")[0] for m in app.sent} == {"install"}


def test_an_execution_loaded_without_its_workflow_is_not_read_once_per_operation(app, make_execution, make_operation):
    """A completion holds its execution with only the columns it locked (workflow_id deferred):
    the batch's one query names it, not a query per operation through the deferred field."""
    execution = make_execution(workflow_id="install")
    partial = Execution.objects.only("id", "status").get(pk=execution.pk)
    ops = [make_operation(OperationState.SENDING, execution, attempt=1) for _ in range(4)]
    for op in ops:
        op.execution = partial
    reads, _ = _execution_reads(ops)
    assert len(reads) == 1
    assert {m["shadow"] for m in app.sent} == {f"install › {op.name} (noop)" for op in ops}


def test_steps_made_ready_hold_their_execution(make_execution, make_operation, monkeypatch):
    """What the engine sends when a step's dependencies succeeded (``progress.send_ready``)
    holds the execution the engine has, so its messages are named without reading it again."""
    monkeypatch.setattr(broker, "send_operations", lambda ops, grants=None: None)
    execution = make_execution(workflow_id="install")
    make_operation(OperationState.PENDING, execution, name="a")
    sent = progress.send_ready(execution, list(Operation.objects.filter(execution_id=execution.pk)))
    assert [op.name for op in sent] == ["a"] and sent[0].execution is execution


def test_advance_message_keeps_its_args_and_names_the_execution(app):
    broker.send_advance(EXECUTION_ID, workflow_id="install")
    broker.send_advance(EXECUTION_ID)
    named, plain = app.sent
    assert named["name"] == plain["name"] == broker.ADVANCE_TASK
    assert named["args"] == plain["args"] == [str(EXECUTION_ID)]
    assert named["shadow"] == "advance › install" and "shadow" not in plain
    assert plain["argsrepr"] == f"(execution='{EXECUTION_ID}')"


def test_the_task_sent_event_is_published_under_the_shadow_name(app, make_operation):
    """Celery names ``task-sent`` after the task; Flower takes its name when it arrives after the
    worker's ``task-received``, so it must carry the shadow too. Switchyard publishes it itself
    (before the message: the test below), so Celery's own is left out — an advance has none."""
    op = make_operation(OperationState.SENDING, attempt=1, name="vm", operation="create_vm")
    broker.send_operations([op])
    broker.send_advance(EXECUTION_ID)
    [event] = app.published
    assert (event["type"], event["name"], event["uuid"]) == ("task-sent", "example › vm (create_vm)", f"{op.pk}.1")
    for message in app.sent:  # what Celery would publish after each message: nothing
        message["event_dispatcher"].publish("task-sent", {"name": message["name"], "uuid": "x"}, None)
    assert len(app.published) == 1


def test_no_task_sent_event_where_the_project_sends_none(app, make_operation, monkeypatch):
    """``task_send_sent_event`` off (Celery's default; Switchyard's own project turns it on):
    the message goes, and no event, as Celery's ``send_task`` would have it."""
    monkeypatch.setattr(app, "conf", Overriding(celery_app.conf, task_send_sent_event=False))
    broker.send_operations([make_operation(OperationState.SENDING, attempt=1)])
    assert len(app.sent) == 1 and app.published == []


class RecordingProducer:
    """A kombu producer that records what it is asked to publish."""

    def __init__(self):
        self.connection = kombu.Connection("memory://")
        self.published = []

    def publish(self, body, **options):
        self.published.append((body, options))


def test_through_celerys_own_send_path_the_message_and_its_sent_event_name_the_step(monkeypatch, make_operation):
    """The real Celery app's ``send_task`` (protocol 2), only the broker replaced: the headers
    travel in the message, its args are unchanged, and its ``task-sent`` event has the name."""
    producer = RecordingProducer()

    @contextmanager
    def producer_or_acquire(given=None):
        yield given or producer

    monkeypatch.setattr(celery_app, "producer_or_acquire", producer_or_acquire)
    assert celery_app.conf.task_send_sent_event
    op = make_operation(OperationState.SENDING, attempt=2, name="vm", operation="create_vm")
    broker.send_operations([op])
    [(body, message)] = [(b, o) for b, o in producer.published if "task" in (o.get("headers") or {})]
    [event] = [b for b, _ in producer.published if isinstance(b, dict) and b.get("type") == "task-sent"]
    # The event first: the agent runs the attempt as it comes, and a monitor takes whatever comes
    # after a task-retried as the task's state (a retried attempt was listed PENDING for good).
    assert [b.get("type") if isinstance(b, dict) else "message" for b, _ in producer.published] == ["task-sent", "message"]
    task_id = task_id_for(op.pk, 2)
    assert (event["uuid"], event["root_id"], event["parent_id"], event["retries"]) == (task_id, task_id, None, 0)
    assert (event["queue"], event["exchange"], event["routing_key"]) == (op.agent, "", op.agent) == \
        (op.agent, message["exchange"], message["routing_key"]), "where Celery says it sent the message"
    assert message["headers"]["task"] == broker.RUNNER_TASK
    assert message["headers"]["shadow"] == event["name"] == "example › vm (create_vm)"
    assert message["headers"]["argsrepr"] == event["args"] == f"(execution='{op.execution_id}', step='vm', attempt=2)"
    assert ast.literal_eval(message["headers"]["kwargsrepr"])["step"] == "vm"
    proof = keys.prove(signing.agent_key(op.agent), keys.Purpose.OPERATION, [str(op.pk), 2])
    assert body[0] == [str(op.pk), 2] and body[1] == {"proof": proof}, "the managers' proof for its agent, no secret"
    shown = [message["headers"]["argsrepr"], message["headers"]["kwargsrepr"], repr(event)]
    assert not any(proof in text for text in shown), "and nothing Flower or a log shows holds it"


def test_through_celerys_own_send_path_an_advance_publishes_its_message_and_no_event(monkeypatch):
    """An advance is the engine's plumbing: Celery's ``send_task`` publishes its message (named
    in its headers, for the manager's log) and no ``task-sent`` event; its task sends none in the
    worker either. Operations keep theirs (the test above)."""
    producer = RecordingProducer()

    @contextmanager
    def producer_or_acquire(given=None):
        yield given or producer

    monkeypatch.setattr(celery_app, "producer_or_acquire", producer_or_acquire)
    assert celery_app.conf.task_send_sent_event and celery_app.conf.worker_send_task_events
    broker.send_advance(EXECUTION_ID, workflow_id="install")
    [(body, message)] = producer.published
    assert message["headers"]["task"] == broker.ADVANCE_TASK and body[0] == [str(EXECUTION_ID)]
    assert message["headers"]["shadow"] == "advance › install"
    assert advance.send_events is False and run_operation.send_events is True
