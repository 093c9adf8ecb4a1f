"""The span of an execution, recorded when it ends: from its creation to its end, with the id
chosen when it was created (``context.reserve``), in the process that ends it (a manager, or the
web process for a force-cancel). Its attempts' spans, recorded earlier by other processes, name
it as their parent.

It follows the ``execution_status_changed`` signal, connected when this package is imported
(``Execution.trace_context``'s default imports it, so every process that can end an execution
has it). A failure here is logged, never raised: a trace must not change what the engine does.

A resumed execution that ends again gets no second span with the same id (a tracing backend
would hold two spans under one id): it gets a span of the run since its last resume, a child of
the first, with ``switchyard.resumed``.
"""

import logging

from workflows_app.signals import execution_status_changed
from workflows_app.states import EXECUTION_TERMINAL, EventType, ExecutionStatus
from workflows_app.tracing import ids, otel
from workflows_app.tracing.context import parse

logger = logging.getLogger(__name__)

#: What the span reads of the execution (a caller that loaded fewer gets them in one query).
FIELDS = ("trace_context", "workflow_id", "deployment_id", "created_at", "started_at", "ended_at", "error")
_TERMINAL_VALUES = {status.value for status in EXECUTION_TERMINAL}

_warned = []


def ended(sender, execution, source, target, event=None, **kwargs):
    """The receiver: the span of an execution that has just ended."""
    if target not in EXECUTION_TERMINAL or not otel.enabled():
        return
    try:
        record(execution, ExecutionStatus(target))
    except Exception:  # a trace must not change what the engine does
        logger.warning("could not record the span of execution %s", execution.pk, exc_info=True)


execution_status_changed.connect(ended, dispatch_uid="workflows_app.tracing.executions")


def record(execution, status):
    """Record the span of ``execution``, which ended ``status``. Returns it (None: not traced)."""
    if "trace_context" in execution.get_deferred_fields():
        execution.refresh_from_db(fields=["trace_context"])
    context = parse(execution.trace_context)
    if context is None:
        return None
    deferred = execution.get_deferred_fields() & set(FIELDS)
    if deferred:
        execution.refresh_from_db(fields=sorted(deferred))
    resumed_at = last_resume(execution)
    attributes = {otel.EXECUTION_ID: str(execution.pk), otel.WORKFLOW: execution.workflow_id,
                  otel.OUTCOME: status.value}
    if execution.deployment_id:
        attributes[otel.DEPLOYMENT_ID] = execution.deployment_id
    name = f"workflow {execution.workflow_id}"
    tracer = otel.tracer()
    if resumed_at is None:
        with ids.reserving(context.trace_id, context.span_id):
            span = tracer.start_span(name, context=context.parent(), attributes=attributes,
                                     start_time=otel.nanoseconds(execution.created_at))
        _check_id(span, context)
        if execution.started_at is not None:
            span.add_event("started", timestamp=otel.nanoseconds(execution.started_at))
    else:
        span = tracer.start_span(name, context=context.execution_span(), attributes={**attributes, otel.RESUMED: True},
                                 start_time=otel.nanoseconds(resumed_at))
    if status != ExecutionStatus.COMPLETED:
        span.set_status(otel.error_status(execution.error.splitlines()[0] if execution.error else status.value))
    span.end(end_time=otel.nanoseconds(execution.ended_at) if execution.ended_at else None)
    return span


def last_resume(execution):
    """When the execution was last resumed from an end (failed, cancelled), or None: it never was."""
    resumes = execution.events.filter(type=EventType.WORKFLOW_RESUMED).order_by("-id").values_list("timestamp", "data")
    for timestamp, data in resumes:
        if isinstance(data, dict) and data.get("from") in _TERMINAL_VALUES:
            return timestamp
    return None


def _check_id(span, context):
    """Warn (once per process) when the tracer provider did not give the span its reserved id."""
    got = span.get_span_context()
    if span.is_recording() and got.span_id != context.span_id and not _warned:
        _warned.append(True)
        logger.warning("the tracer provider gave an execution's span an id of its own: its attempts' spans "
                       "point at a parent that is never recorded. Give the SDK's TracerProvider "
                       "id_generator=workflows_app.tracing.ids.ExecutionIdGenerator()")
