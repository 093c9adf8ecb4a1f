"""Traces end to end: every process of a stack prints its spans (``OTEL_TRACES_EXPORTER=console``,
one JSON line each, in its log), this test's process records its own in memory. A two-step
workflow on an agent, whose second step fails once and is retried, is one trace: the span of the
request that started it, the execution's span (recorded by the manager that ended it) and one
span per attempt (recorded by the agent), each with its parent and attributes.

The stack's processes import this module as a workflow module (for the workflow below).
"""

import json
import logging
import re
import subprocess
import sys

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace  # noqa: E402

from tests import workflows as wf  # noqa: E402
from tests.integration import harness  # noqa: E402
from tests.integration.harness import ROOT  # noqa: E402
from tests.unit.test_tracing import spans  # noqa: E402,F401
from workflows_app import services  # noqa: E402
from workflows_app.models import Operation  # noqa: E402
from workflows_app.sdk import operation, workflow  # noqa: E402
from workflows_app.states import EXECUTION_TERMINAL  # noqa: E402
from workflows_app.tracing import context  # noqa: E402

pytestmark = pytest.mark.integration

TIMEOUT = 30


def record_execution_id():
    """The ``execution_id`` a log record made here and now carries."""
    return logging.getLogger(__name__).makeRecord(__name__, logging.INFO, __file__, 0, "probe", (), None).execution_id


@operation(name="tracing_first", max_retries=0)
def first(ctx):
    return record_execution_id()


@workflow(name="tracing_two_steps")
def two_steps(ctx, agent, tag):
    seen_by_the_agent = ctx.await_execute("first", first, agent=agent)
    ctx.await_execute("second", wf.flaky, tag, failures=1, agent=agent)
    ctx.set_payload({"agent": seen_by_the_agent, "manager": record_execution_id()})


@pytest.fixture
def console_traces(monkeypatch):
    """Every process of the stack (requested after this fixture) prints its spans, and imports
    this module's workflow."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setattr(harness, "WORKFLOW_MODULES", f"{harness.WORKFLOW_MODULES},{__name__}")


def printed_spans(process) -> list[dict]:
    """The spans a process printed: the lines of its log that are a span's JSON."""
    found = []
    for line in process.log_text().splitlines():
        if line.startswith('{"name"'):
            found.append(json.loads(line))
    return found


def test_an_execution_is_one_trace_across_the_starting_process_the_manager_and_the_agent(console_traces, spans,
                                                                                           stack):
    stack.start_manager(concurrency=2)
    agent = stack.agent_name("traced")
    stack.start_agent(agent, concurrency=1)
    stack.wait_for_agent(agent)

    with trace.get_tracer("tests").start_as_current_span("POST /api/v1/executions") as request:
        execution = services.start("tracing_two_steps", {"agent": agent, "tag": f"tracing-{stack.suffix}"})
    done = stack.wait_for_status(execution.pk, [status.value for status in EXECUTION_TERMINAL], timeout=TIMEOUT)
    assert done.status == "completed", harness.describe_execution(execution.pk)
    assert done.payload == {"agent": str(execution.pk), "manager": str(execution.pk)}  # execution_id on log records

    reserved = context.parse(execution.trace_context)
    started_in = request.get_span_context()
    trace_id, request_id = f"0x{started_in.trace_id:032x}", f"0x{started_in.span_id:016x}"
    execution_span_id = f"0x{reserved.span_id:016x}"
    processes = {process.name: process for process in stack.processes}

    def execution_spans():
        return [s for s in printed_spans(processes["manager"]) if s["name"] == "workflow tracing_two_steps"]

    # The manager records it once the end commits: just after the status the test waited for.
    [ended] = stack.wait_for(execution_spans, timeout=10, what="the execution's span in the manager's output")
    assert (ended["context"]["trace_id"], ended["context"]["span_id"], ended["parent_id"]) == (
        trace_id, execution_span_id, request_id)
    assert ended["attributes"] == {"switchyard.execution_id": str(execution.pk),
                                   "switchyard.workflow": "tracing_two_steps", "switchyard.outcome": "completed"}
    assert [event["name"] for event in ended["events"]] == ["started"]

    attempts = sorted((s for s in printed_spans(processes[agent]) if s["context"]["trace_id"] == trace_id),
                      key=lambda s: s["start_time"])
    assert [(s["name"], s["attributes"]["switchyard.step"], s["attributes"]["switchyard.attempt"],
             s["attributes"]["switchyard.outcome"], s["attributes"].get("switchyard.error_type"))
            for s in attempts] == [
        ("operation tracing_first", "first", 1, "succeeded", None),
        ("operation it_flaky", "second", 1, "failed", "RecoverableError"),
        ("operation it_flaky", "second", 2, "succeeded", None)]
    operations = {op.name: str(op.pk) for op in Operation.objects.filter(execution=execution)}
    for span in attempts:
        assert span["parent_id"] == execution_span_id
        assert span["kind"] == "SpanKind.CONSUMER"
        attributes = span["attributes"]
        assert [attributes[f"switchyard.{name}"] for name in ("execution_id", "workflow", "agent", "operation_id")] == [
            str(execution.pk), "tracing_two_steps", agent, operations[attributes["switchyard.step"]]]
    assert attempts[1]["status"]["status_code"] == "ERROR"
    assert attempts[1]["attributes"]["switchyard.retryable"] is True

    # The trace holds nothing else: no process printed another span of it, or one twice.
    everything = [s for process in stack.processes for s in printed_spans(process)
                  if s["context"]["trace_id"] == trace_id]
    assert len(everything) == 4 and len({s["context"]["span_id"] for s in everything}) == 4
    assert [s.name for s in spans.get_finished_spans()] == ["POST /api/v1/executions"]


def test_the_tracing_benchmark_runs_a_tiny_round():
    """``python -m bench.tracing`` (the numbers of the tracing page), so that it cannot rot unnoticed.
    Its timings are read by people, never asserted."""
    done = subprocess.run([sys.executable, "-m", "bench.tracing", "--attempts", "20", "--rounds", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"an attempt \(headers, span, runner's call of a no-op\), 1 rounds of 20: untraced [\d.]+ µs, "
                     r"traced [\d.]+ µs", done.stdout), done.stdout
    assert re.search(r"an execution's end, \w+: its span recorded in \d+ µs \(one query\)", done.stdout), done.stdout
