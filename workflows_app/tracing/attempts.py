"""The span of one attempt of a step, recorded by the process that runs it (an agent, or a manager
for a step that names no agent): a child of its execution's span, whose context came in the
message's headers (``context.from_message``). It is the current span while the operation runs,
so the operation's own spans (an instrumented HTTP call, say) are its children; and the log
records of the attempt carry its execution's id (``logs.about``).
"""

import os

import workflows_app.tracing.context as context
import workflows_app.tracing.logs as logs
import workflows_app.tracing.otel as otel


def run(func, ctx, answer, request):
    """``func(ctx, answer)`` — the runner's call of the operation, which returns the outcome's
    report fields (``outcome``, ``error``, ``retryable``; ``lost``) — inside the attempt's span.
    ``ctx``: the operation's context (execution, step, attempt, agent); ``answer``: the managers'
    claim answer (the operation's name); ``request``: the Celery task's request (the message's
    headers)."""
    with logs.about(ctx.execution_id):
        if not otel.enabled():
            return func(ctx, answer)
        parent, workflow = context.from_message(request)
        attributes = {
            otel.EXECUTION_ID: str(ctx.execution_id),
            otel.STEP: ctx.name,
            otel.OPERATION: str(answer.get("operation", "")),
            otel.OPERATION_ID: str(ctx.operation_id),
            otel.ATTEMPT: ctx.attempt,
            otel.AGENT: ctx.agent or "",
        }
        if workflow:
            attributes[otel.WORKFLOW] = workflow
        span = otel.tracer().start_span(f"operation {answer.get('operation', ctx.name)}", context=parent,
                                        kind=otel.SpanKind.CONSUMER, attributes=attributes)
        pid = os.getpid()
        try:
            with otel.trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                outcome = func(ctx, answer)
            if span.is_recording():
                describe(span, outcome)
            return outcome
        except BaseException as exc:
            if os.getpid() == pid and span.is_recording():
                span.set_status(otel.error_status(f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            # Hazard: a process the operation forked leaves through here too (its SystemExit):
            # only the process that started the span ends it, else it would be recorded twice.
            if os.getpid() == pid:
                span.end()


def describe(span, outcome):
    """Set what the attempt did on its span: outcome (``succeeded``, ``failed``, ``cancelled``,
    or ``lost`` when its process was stopped under it), error type, whether it may be retried;
    an ERROR status when it did not succeed."""
    lost = bool(outcome.get("lost"))
    span.set_attribute(otel.OUTCOME, "lost" if lost else str(outcome.get("outcome")))
    if "retryable" in outcome:
        span.set_attribute(otel.RETRYABLE, bool(outcome["retryable"]))
    error = outcome.get("error")
    if isinstance(error, dict):
        span.set_attribute(otel.ERROR_TYPE, str(error.get("type") or "Error"))
        span.set_status(otel.error_status(f"{error.get('type') or 'Error'}: {error.get('message', '')}"))
