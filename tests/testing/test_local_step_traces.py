"""A local step is traced as an agent's attempt is: its span, in the pass' process, is a child of
its execution's span, named after its operation, with its step, attempt and outcome."""

import pytest
from django.test import override_settings

pytest.importorskip("opentelemetry.sdk.trace")

from tests.unit.test_tracing import request_span, spans  # noqa: E402,F401
from workflows_app.tracing import context, otel  # noqa: E402


@pytest.fixture(autouse=True)
def local_step_workflows():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.local_step_workflows"]):
        yield


def test_each_local_step_is_a_span_under_its_execution(switchyard, spans):  # noqa: F811
    with request_span():
        result = switchyard.run("local_chain", {"n": 3})
    assert result.status == "completed"
    execution_span = context.parse(result.execution.trace_context)
    steps = [span for span in spans.get_finished_spans() if span.name == "operation local_add"]
    assert [span.attributes[otel.STEP] for span in steps] == ["add-0", "add-1", "add-2"]
    for span in steps:
        assert span.context.trace_id == execution_span.trace_id
        assert span.parent.span_id == execution_span.span_id
        assert span.attributes[otel.OUTCOME] == "succeeded"
        assert span.attributes[otel.ATTEMPT] == 1
