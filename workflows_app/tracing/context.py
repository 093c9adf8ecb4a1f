"""An execution's trace context: chosen when the execution is created, kept on its row
(``Execution.trace_context``), carried in the headers of its operations' messages.

Stored as text: the W3C ``traceparent`` of the execution's span (its trace id, its span id, the
sampled flag), then ``;`` and the span id of its parent — the span that was current where the
execution was created (a request's, a command's) — or nothing for a root::

    00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01;53995c3f42cd8ad8

Empty when the creating process had no tracer provider set: that execution is not traced.
"""

from dataclasses import dataclass

import workflows_app.tracing.ids as ids
import workflows_app.tracing.otel as otel

#: The message header that carries the context: a mapping that the global propagator writes to
#: (``traceparent`` and ``tracestate`` by default, whatever ``OTEL_PROPAGATORS`` says) and
#: :data:`WORKFLOW_KEY`. Nested under one name of Switchyard's own, so that it never meets the
#: headers of Celery's own instrumentation (which writes ``traceparent`` at the top level).
HEADER = "switchyard_trace"
#: The execution's workflow, in :data:`HEADER` (an agent's claim answer does not name it).
WORKFLOW_KEY = "switchyard-workflow"
#: The longest workflow name read from a header.
MAX_WORKFLOW = 200


@dataclass(frozen=True)
class ExecutionContext:
    """The identity of an execution's span, chosen before the span exists (:func:`reserve`)."""

    trace_id: int
    span_id: int
    sampled: bool
    parent_span_id: int  # 0: the execution's span is a root

    def __str__(self):
        flags = "01" if self.sampled else "00"
        parent = f"{self.parent_span_id:016x}" if self.parent_span_id else ""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{flags};{parent}"

    def _span_context(self, span_id):
        return otel.SpanContext(self.trace_id, span_id, is_remote=True,
                                trace_flags=otel.TraceFlags(otel.TraceFlags.SAMPLED if self.sampled else 0))

    def execution_span(self):
        """The execution's span as a parent: a context to start its children in."""
        return otel.trace.set_span_in_context(otel.NonRecordingSpan(self._span_context(self.span_id)), otel.Context())

    def parent(self):
        """The context the execution's own span starts in: its parent's span, or none (a root;
        never the span current where the execution happens to end)."""
        if not self.parent_span_id:
            return otel.Context()
        return otel.trace.set_span_in_context(otel.NonRecordingSpan(self._span_context(self.parent_span_id)),
                                              otel.Context())


def reserve() -> str:
    """A new execution's context (:class:`ExecutionContext` as text), the child of the span
    current here, or a new trace's root; "" when this process records no spans
    (``otel.enabled``). The default of ``Execution.trace_context``: every way an execution is
    created (a request, a command, a schedule, a child, a rerun) gets one.

    A root is sampled: the spans of its attempts, recorded before its own span is, follow that
    decision (the SDK's default, parent-based sampler). A child follows its parent's decision."""
    if not otel.enabled():
        return ""
    current = otel.trace.get_current_span().get_span_context()
    if current.is_valid:
        context = ExecutionContext(current.trace_id, ids.random_span_id(), current.trace_flags.sampled, current.span_id)
    else:
        context = ExecutionContext(ids.random_trace_id(), ids.random_span_id(), True, 0)
    return str(context)


def parse(stored):
    """The :class:`ExecutionContext` of ``stored`` (:func:`reserve`'s text), or None: empty,
    or not that format (nothing to trace)."""
    if not stored or not otel.available():
        return None
    try:
        traceparent, _, parent = str(stored).partition(";")
        version, trace_id, span_id, flags = traceparent.split("-")
        if (version, len(trace_id), len(span_id), len(flags)) != ("00", 32, 16, 2) or len(parent) not in (0, 16):
            return None
        context = ExecutionContext(int(trace_id, 16), int(span_id, 16), bool(int(flags, 16) & 1),
                                   int(parent, 16) if parent else 0)
    except ValueError:
        return None
    return context if context.trace_id and context.span_id else None


def message_headers(stored, workflow_id=None):
    """The headers that carry an execution's context (``stored``) to the process that runs its
    operation: ``{HEADER: {...}}``, written by the global propagator; None when the execution
    is not traced or the API is not installed here (the message carries nothing more)."""
    context = parse(stored)
    if context is None:
        return None
    carrier = {}
    otel.propagate.inject(carrier, context=context.execution_span())
    if not carrier:
        return None  # OTEL_PROPAGATORS=none
    if workflow_id:
        carrier[WORKFLOW_KEY] = str(workflow_id)
    return {HEADER: carrier}


def from_message(request):
    """``(context, workflow)`` from the headers of the message a Celery task runs (``request``,
    its ``Task.request``): the context to start its span in (None: none came) and the workflow
    named there (None: none). Headers are not authenticated: a forged one only moves a span to
    another trace."""
    carrier = getattr(request, HEADER, None)
    if not isinstance(carrier, dict) or not otel.available():
        return None, None
    carrier = {key: value for key, value in carrier.items() if isinstance(key, str) and isinstance(value, str)}
    workflow = carrier.pop(WORKFLOW_KEY, None)
    extracted = otel.propagate.extract(carrier, context=otel.Context())
    parent = otel.trace.get_current_span(extracted).get_span_context()
    return (extracted if parent.is_valid else None), (workflow[:MAX_WORKFLOW] if workflow else None)
