"""Traces (``workflows_app.tracing``) in this process, on OpenTelemetry's SDK with an in-memory
exporter: an execution's context chosen under the current span, carried in message headers and
read back, the attempt's span with its attributes, ``execution_id`` on log records, the id
generator's reserved ids. No database, no broker."""

import logging
import uuid
from types import SimpleNamespace

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from opentelemetry.util._once import Once  # noqa: E402

from workflows_app.tracing import attempts, context, ids, logs, otel  # noqa: E402


def install_provider(provider):
    """Make ``provider`` the global tracer provider; returns what undoes it. The API lets a
    process set it once: the test resets the API's globals around it, as OpenTelemetry's own
    test utilities do, so no other test runs traced."""
    saved = (trace._TRACER_PROVIDER_SET_ONCE, trace._TRACER_PROVIDER)
    trace._TRACER_PROVIDER_SET_ONCE, trace._TRACER_PROVIDER = Once(), None
    trace.set_tracer_provider(provider)

    def undo():
        trace._TRACER_PROVIDER_SET_ONCE, trace._TRACER_PROVIDER = saved
        provider.shutdown()

    return undo


@pytest.fixture
def spans():
    """The in-memory exporter of a global tracer provider with Switchyard's id generator."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=ids.ExecutionIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    undo = install_provider(provider)
    try:
        yield exporter
    finally:
        undo()


def request_span():
    """A span standing for the request that starts an execution."""
    return trace.get_tracer("test").start_as_current_span("POST /api/v1/executions")


# --- the execution's context ------------------------------------------------------------------

def test_without_a_tracer_provider_nothing_is_chosen():
    assert not otel.enabled()
    assert context.reserve() == ""
    assert context.message_headers("", "wf") is None


def test_an_execution_started_under_a_span_is_its_child(spans):
    with request_span() as request:
        stored = context.reserve()
    parsed = context.parse(stored)
    parent = request.get_span_context()
    assert parsed.trace_id == parent.trace_id and parsed.parent_span_id == parent.span_id
    assert parsed.span_id not in (0, parent.span_id) and parsed.sampled
    assert str(parsed) == stored and len(stored) <= 80
    assert stored == f"00-{parent.trace_id:032x}-{parsed.span_id:016x}-01;{parent.span_id:016x}"


def test_an_execution_started_outside_any_span_is_a_new_traces_root(spans):
    first, second = context.parse(context.reserve()), context.parse(context.reserve())
    assert first.parent_span_id == 0 and first.sampled and first.trace_id != second.trace_id
    assert str(first).endswith("-01;")


def test_an_execution_under_a_span_not_sampled_is_not_sampled(spans):
    unsampled = trace.SpanContext(0xabc, 0xdef, is_remote=True, trace_flags=trace.TraceFlags(0))
    with trace.use_span(trace.NonRecordingSpan(unsampled)):
        parsed = context.parse(context.reserve())
    assert (parsed.trace_id, parsed.parent_span_id, parsed.sampled) == (0xabc, 0xdef, False)


@pytest.mark.parametrize("stored", [
    "", "garbage", "01-" + "a" * 32 + "-" + "b" * 16 + "-01;", "00-" + "0" * 32 + "-" + "b" * 16 + "-01;",
    "00-" + "a" * 32 + "-" + "b" * 16 + "-01;xyz", "00-" + "g" * 32 + "-" + "b" * 16 + "-01;",
    "00-" + "a" * 32 + "-" + "b" * 15 + "-01;"])
def test_a_stored_context_that_is_not_one_is_not_traced(stored):
    assert context.parse(stored) is None
    assert context.message_headers(stored, "wf") is None


# --- the message headers ------------------------------------------------------------------

def test_the_headers_name_the_execution_span_as_the_parent_and_come_back(spans):
    with request_span():
        stored = context.reserve()
    parsed = context.parse(stored)
    headers = context.message_headers(stored, "install")
    carrier = headers[context.HEADER]
    assert carrier["traceparent"] == f"00-{parsed.trace_id:032x}-{parsed.span_id:016x}-01"
    assert carrier[context.WORKFLOW_KEY] == "install"
    # Celery hands a message's headers to its task as attributes of the task's request.
    extracted, workflow = context.from_message(SimpleNamespace(**headers))
    got = trace.get_current_span(extracted).get_span_context()
    assert (got.trace_id, got.span_id, got.is_remote, workflow) == (parsed.trace_id, parsed.span_id, True, "install")


@pytest.mark.parametrize("request_", [SimpleNamespace(), SimpleNamespace(switchyard_trace="00-abc"),
                                      SimpleNamespace(switchyard_trace={"traceparent": "not one"}),
                                      SimpleNamespace(switchyard_trace={"traceparent": 7, 3: "x"})])
def test_a_message_without_a_usable_context_gives_none(spans, request_):
    assert context.from_message(request_) == (None, None)


# --- the attempt's span -------------------------------------------------------------------

def attempt(stored, *, attempt=1, headers=True):
    ctx = SimpleNamespace(operation_id=uuid.uuid4(), execution_id=uuid.uuid4(), name="create_vm-1", attempt=attempt,
                          agent="host-1")
    answer = {"operation": "create_vm", "args": [], "kwargs": {}}
    request = SimpleNamespace(**(context.message_headers(stored, "install") or {})) if headers else SimpleNamespace()
    return ctx, answer, request


def only(exporter, name):
    found = [span for span in exporter.get_finished_spans() if span.name == name]
    assert len(found) == 1, [span.name for span in exporter.get_finished_spans()]
    return found[0]


def test_an_attempt_is_a_child_of_its_execution_span_with_its_attributes(spans):
    stored = context.reserve()
    parsed = context.parse(stored)
    ctx, answer, request = attempt(stored, attempt=2)
    seen = {}

    def run(ctx, answer):
        seen["current"] = trace.get_current_span().get_span_context()
        return {"outcome": "succeeded", "result": 1}

    assert attempts.run(run, ctx, answer, request) == {"outcome": "succeeded", "result": 1}
    span = only(spans, "operation create_vm")
    assert (span.context.trace_id, span.parent.span_id) == (parsed.trace_id, parsed.span_id)
    assert seen["current"].span_id == span.context.span_id  # the operation's own spans are its children
    assert span.kind == SpanKind.CONSUMER and span.status.status_code == StatusCode.UNSET
    assert dict(span.attributes) == {
        "switchyard.execution_id": str(ctx.execution_id), "switchyard.workflow": "install",
        "switchyard.step": "create_vm-1", "switchyard.operation": "create_vm",
        "switchyard.operation_id": str(ctx.operation_id), "switchyard.attempt": 2, "switchyard.agent": "host-1",
        "switchyard.outcome": "succeeded"}


@pytest.mark.parametrize("outcome, expected", [
    ({"outcome": "failed", "retryable": True, "error": {"type": "RecoverableError", "message": "busy\nnow"}},
     ("failed", "RecoverableError", True, "RecoverableError: busy now")),
    ({"outcome": "cancelled", "retryable": False, "error": {"type": "OperationCancelled", "message": "stop"}},
     ("cancelled", "OperationCancelled", False, "OperationCancelled: stop")),
    ({"outcome": "failed", "retryable": True, "lost": True, "error": {"type": "WorkerLost", "message": "SIGTERM"}},
     ("lost", "WorkerLost", True, "WorkerLost: SIGTERM")),
])
def test_an_attempt_that_did_not_succeed_says_how_and_why(spans, outcome, expected):
    ctx, answer, request = attempt(context.reserve())
    assert attempts.run(lambda ctx, answer: outcome, ctx, answer, request) is outcome
    span = only(spans, "operation create_vm")
    assert (span.attributes["switchyard.outcome"], span.attributes["switchyard.error_type"],
            span.attributes["switchyard.retryable"], span.status.description) == expected
    assert span.status.status_code == StatusCode.ERROR


def test_an_attempt_whose_runner_raises_ends_its_span_in_error_and_raises(spans):
    ctx, answer, request = attempt(context.reserve())

    def run(ctx, answer):
        raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt):
        attempts.run(run, ctx, answer, request)
    span = only(spans, "operation create_vm")
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, "KeyboardInterrupt: stop")


def test_an_attempt_whose_message_has_no_context_starts_in_the_current_one(spans):
    ctx, answer, request = attempt("", headers=False)
    with request_span() as around:
        attempts.run(lambda ctx, answer: {"outcome": "succeeded"}, ctx, answer, request)
    span = only(spans, "operation create_vm")
    assert span.parent.span_id == around.get_span_context().span_id
    assert "switchyard.workflow" not in span.attributes


def test_without_a_tracer_provider_an_attempt_runs_untraced():
    ctx, answer, request = attempt("", headers=False)
    assert attempts.run(lambda ctx, answer: {"outcome": "succeeded"}, ctx, answer, request) == {"outcome": "succeeded"}


# --- execution_id on log records ------------------------------------------------------------

def test_log_records_carry_the_execution_id_while_an_attempt_runs(caplog):
    ctx, answer, request = attempt("", headers=False)
    log = logging.getLogger("tests.tracing")

    def run(ctx, answer):
        log.warning("inside")
        return {"outcome": "succeeded"}

    with caplog.at_level(logging.INFO, logger="tests.tracing"):
        log.warning("before")
        attempts.run(run, ctx, answer, request)
        log.warning("after")
    assert [(r.getMessage(), r.execution_id) for r in caplog.records] == [
        ("before", None), ("inside", str(ctx.execution_id)), ("after", None)]


def test_the_execution_id_can_be_formatted_and_nests():
    formatter = logging.Formatter("%(execution_id)s %(message)s")
    outer, inner = uuid.uuid4(), uuid.uuid4()

    def line():
        return formatter.format(logging.getLogger("tests.tracing").makeRecord("x", logging.INFO, "f", 1, "m", (), None))

    with logs.about(outer):
        with logs.about(inner):
            assert line() == f"{inner} m"
        assert line() == f"{outer} m"
    assert line() == "None m"


def test_the_record_factory_is_installed_once():
    factory = logging.getLogRecordFactory()
    logs.install()
    assert logging.getLogRecordFactory() is factory and factory.switchyard_execution_id


def test_a_greenlet_of_the_pass_sees_the_execution_id():
    """A live workflow run is a greenlet, which starts with empty context variables."""
    greenlet = pytest.importorskip("greenlet")
    execution_id = uuid.uuid4()
    with logs.about(execution_id):
        seen = greenlet.greenlet(logs.current).switch()
    assert seen == str(execution_id)


# --- the reserved ids ---------------------------------------------------------------------------

def test_reserved_ids_go_to_the_one_span_started_inside_the_block(spans):
    tracer = trace.get_tracer("test")
    with ids.reserving(0x1234, 0x5678):
        reserved = tracer.start_span("reserved")
        other = tracer.start_span("other")
    reserved.end()
    other.end()
    assert (reserved.context.trace_id, reserved.context.span_id) == (0x1234, 0x5678)
    assert other.context.span_id != 0x5678 and other.context.trace_id != 0x1234


def test_the_id_generator_wraps_another_for_the_ids_it_does_not_hold():
    class Fixed:
        def generate_span_id(self):
            return 7

        def generate_trace_id(self):
            return 9

    generator = ids.ExecutionIdGenerator(Fixed())
    assert (generator.generate_trace_id(), generator.generate_span_id()) == (9, 7)
    with ids.reserving(1, 2):
        assert (generator.generate_trace_id(), generator.generate_span_id()) == (1, 2)
        assert (generator.generate_trace_id(), generator.generate_span_id()) == (9, 7)
