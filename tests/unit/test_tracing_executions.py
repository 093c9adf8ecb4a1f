"""The execution's span (``workflows_app.tracing.executions``): recorded when the execution ends,
through the engine's one writer of statuses, with the ids chosen when it was created, its
creation and end as its times, its parent the span current where it was created. On the test's
database; OpenTelemetry's SDK with an in-memory exporter (``test_tracing.spans``)."""

import logging
from contextlib import contextmanager
from datetime import timedelta

import kombu
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from switchyard.celery import app as celery_app  # noqa: E402
from tests.unit.test_tracing import install_provider, request_span, spans  # noqa: E402,F401
from workflows_app import broker, clock, transitions  # noqa: E402
from workflows_app.models import Execution, Operation  # noqa: E402
from workflows_app.states import ExecutionStatus, OperationState  # noqa: E402
from workflows_app.tracing import context, executions, otel  # noqa: E402
from workflows_app.transitions import execution_transition  # noqa: E402

pytestmark = pytest.mark.django_db


@pytest.fixture
def end(django_capture_on_commit_callbacks):
    """``end(execution, status, **fields)``: the transition, and what follows its commit."""
    def end(execution, status, **fields):
        with django_capture_on_commit_callbacks(execute=True):
            return execution_transition(execution, status, **fields)

    return end


def started(make_execution, **fields):
    return make_execution(status=ExecutionStatus.STARTED, workflow_id="install",
                          started_at=clock.now() + timedelta(seconds=1), **fields)


def ns(moment):
    return otel.nanoseconds(moment)


def test_an_ended_execution_is_one_span_with_its_reserved_ids_times_and_parent(spans, make_execution, end):
    with request_span() as request:
        execution = started(make_execution, deployment_id="site-1")
    reserved = context.parse(execution.trace_context)
    spans.clear()  # the request's own span
    end(execution, ExecutionStatus.COMPLETED)
    [span] = spans.get_finished_spans()
    assert (span.context.trace_id, span.context.span_id) == (reserved.trace_id, reserved.span_id)
    assert span.parent.span_id == request.get_span_context().span_id
    assert (span.start_time, span.end_time) == (ns(execution.created_at), ns(execution.ended_at))
    assert [(event.name, event.timestamp) for event in span.events] == [("started", ns(execution.started_at))]
    assert span.name == "workflow install" and span.status.status_code == StatusCode.UNSET
    assert dict(span.attributes) == {"switchyard.execution_id": str(execution.pk), "switchyard.workflow": "install",
                                     "switchyard.outcome": "completed", "switchyard.deployment_id": "site-1"}


def test_an_execution_that_failed_is_a_span_in_error(spans, make_execution, end):
    execution = started(make_execution)
    end(execution, ExecutionStatus.FAILED, error="step create_vm failed: NonRecoverableError\nTraceback ...")
    [span] = spans.get_finished_spans()
    assert span.parent is None  # created outside any span: a root
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR,
                                                                    "step create_vm failed: NonRecoverableError")
    assert span.attributes["switchyard.outcome"] == "failed"


def test_a_transition_that_is_not_an_end_records_nothing(spans, make_execution, end):
    end(started(make_execution), ExecutionStatus.CANCELLING)
    assert spans.get_finished_spans() == ()


def test_an_execution_created_untraced_is_never_traced(make_execution, end):
    execution = started(make_execution)
    assert execution.trace_context == ""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    undo = install_provider(provider)
    try:
        end(execution, ExecutionStatus.COMPLETED)
    finally:
        undo()
    assert exporter.get_finished_spans() == ()


def test_an_execution_resumed_after_its_end_gets_a_span_of_its_new_run(spans, make_execution, end):
    execution = started(make_execution)
    reserved = context.parse(execution.trace_context)
    end(execution, ExecutionStatus.FAILED, error="it failed")
    execution = end(execution, ExecutionStatus.STARTED)  # resumed
    resumed_at = execution.events.get(type="workflow_resumed").timestamp
    end(execution, ExecutionStatus.COMPLETED)
    first, second = spans.get_finished_spans()
    assert first.context.span_id == reserved.span_id
    assert second.context.span_id != reserved.span_id  # never two spans under one id
    assert (second.context.trace_id, second.parent.span_id) == (reserved.trace_id, reserved.span_id)
    assert second.start_time == ns(resumed_at) and second.attributes["switchyard.resumed"] is True
    assert second.status.status_code == StatusCode.UNSET


def test_a_stuck_execution_resumed_while_started_still_gets_its_span(spans, make_execution, end):
    execution = end(started(make_execution), ExecutionStatus.STARTED)  # resumed, never ended
    end(execution, ExecutionStatus.COMPLETED)
    [span] = spans.get_finished_spans()
    assert span.context.span_id == context.parse(execution.trace_context).span_id


def test_an_execution_loaded_with_few_fields_gets_the_same_span(spans, make_execution, end):
    execution = started(make_execution)
    few = Execution.objects.only("id", "status").get(pk=execution.pk)
    end(few, ExecutionStatus.TIMED_OUT)
    [span] = spans.get_finished_spans()
    assert span.context.span_id == context.parse(execution.trace_context).span_id
    assert span.start_time == ns(execution.created_at) and span.name == "workflow install"
    assert span.status.description == "timed_out"


def test_a_provider_that_does_not_honour_the_reserved_ids_is_warned_about(make_execution, end, caplog):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # the SDK's own random ids
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    undo = install_provider(provider)
    try:
        execution = started(make_execution)
        with caplog.at_level(logging.WARNING, logger=executions.__name__):
            end(execution, ExecutionStatus.COMPLETED)
    finally:
        undo()
    [span] = exporter.get_finished_spans()
    assert span.context.span_id != context.parse(execution.trace_context).span_id
    assert "ExecutionIdGenerator" in caplog.text


def test_a_span_that_cannot_be_recorded_changes_nothing(spans, make_execution, end, monkeypatch, caplog):
    def broken():
        raise RuntimeError("the exporter's library is broken")

    monkeypatch.setattr(otel, "tracer", broken)
    execution = started(make_execution)
    with caplog.at_level(logging.WARNING, logger=executions.__name__):
        end(execution, ExecutionStatus.COMPLETED)
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.COMPLETED
    assert not execution.events.filter(type="listener_failed").exists()
    assert "could not record the span" in caplog.text


def test_the_trace_context_is_stored_with_the_row(spans, make_execution):
    with request_span():
        execution = started(make_execution)
    assert Execution.objects.get(pk=execution.pk).trace_context == execution.trace_context != ""
    assert trace.get_current_span() is trace.INVALID_SPAN


# --- the context in the operations' messages -----------------------------------------------------

class RecordingProducer:
    """A kombu producer that records what Celery's own send path asks it to publish."""

    def __init__(self):
        self.connection = kombu.Connection("memory://")
        self.published = []

    def publish(self, body, **options):
        self.published.append(options)


@pytest.fixture
def producer(monkeypatch):
    recording = RecordingProducer()

    @contextmanager
    def producer_or_acquire(given=None):
        yield given or recording

    monkeypatch.setattr(celery_app, "producer_or_acquire", producer_or_acquire)
    return recording


def message_headers(producer):
    return [options["headers"] for options in producer.published if "task" in (options.get("headers") or {})]


def test_an_operations_message_carries_its_executions_context_in_its_headers(spans, producer, make_execution,
                                                                              make_operation):
    with request_span():
        traced = started(make_execution)
    untraced = started(make_execution, trace_context="")  # as one created where nothing was traced
    ops = [make_operation(OperationState.SENDING, execution, name=name, attempt=1)
           for name, execution in (("vm", traced), ("plain", untraced))]
    broker.send_operations(Operation.objects.filter(pk__in=[op.pk for op in ops]).order_by("name"))
    plain, vm = message_headers(producer)
    reserved = context.parse(traced.trace_context)
    assert vm[context.HEADER] == {"traceparent": f"00-{reserved.trace_id:032x}-{reserved.span_id:016x}-01",
                                  context.WORKFLOW_KEY: "install"}
    assert context.HEADER not in plain


def test_a_completion_sends_its_dependents_with_the_context_and_no_query_more(spans, producer, make_execution,
                                                                              make_operation):
    """What a completion locks of the execution (transitions.LOCKED_EXECUTION_FIELDS) names the
    messages, their priority and now their trace: the send reads nothing more."""
    execution = started(make_execution)
    op = make_operation(OperationState.SENDING, execution, name="vm", attempt=1)
    locked = Operation.objects.get(pk=op.pk)
    locked.execution = Execution.objects.only(*transitions.LOCKED_EXECUTION_FIELDS).get(pk=execution.pk)
    with CaptureQueriesContext(connection) as queries:
        broker.send_operations([locked])
    assert [q["sql"] for q in queries if Execution._meta.db_table in q["sql"]] == []
    [headers] = message_headers(producer)
    reserved = context.parse(execution.trace_context)
    assert headers[context.HEADER]["traceparent"].split("-")[2] == f"{reserved.span_id:016x}"
