"""The one import of OpenTelemetry's API, guarded: without the ``[otel]`` extra, :data:`trace` and
:data:`propagate` are None, :func:`enabled` is false, and the rest of the package does nothing.

Only ``opentelemetry-api`` is used (its global tracer provider and propagators), never the SDK:
the host process configures the SDK (or leaves the API's no-op provider in place).
"""

try:
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError:  # the [otel] extra is not installed: tracing is off, nothing else changes
    propagate = trace = Context = NonRecordingSpan = SpanContext = SpanKind = Status = StatusCode = TraceFlags = None

#: The instrumentation scope of every span recorded here.
SCOPE = "workflows_app.tracing"

#: Span attributes, all under ``switchyard.``.
EXECUTION_ID = "switchyard.execution_id"
WORKFLOW = "switchyard.workflow"
DEPLOYMENT_ID = "switchyard.deployment_id"
STEP = "switchyard.step"
OPERATION = "switchyard.operation"
OPERATION_ID = "switchyard.operation_id"
ATTEMPT = "switchyard.attempt"
AGENT = "switchyard.agent"
OUTCOME = "switchyard.outcome"
ERROR_TYPE = "switchyard.error_type"
RETRYABLE = "switchyard.retryable"
RESUMED = "switchyard.resumed"

#: The longest span status description set from an error.
DESCRIPTION_CHARS = 500


def available() -> bool:
    """Whether ``opentelemetry-api`` is installed."""
    return trace is not None


def enabled() -> bool:
    """Whether this process records spans: the API is installed and a tracer provider was set
    (the SDK's, configured by the host). The API's default provider, a proxy to none, records
    nothing, so nothing is prepared for it."""
    if trace is None:
        return False
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


_cached = (None, None)


def tracer():
    """This package's tracer from the global provider (the same one until the provider changes:
    a tracer taken before the provider was set would stay a proxy's)."""
    global _cached
    provider = trace.get_tracer_provider()
    if _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(SCOPE))
    return _cached[1]


def error_status(description):
    """An ERROR span status with ``description`` on one line, cut to :data:`DESCRIPTION_CHARS`."""
    line = " ".join(str(description or "").split())
    return Status(StatusCode.ERROR, line[:DESCRIPTION_CHARS])


def nanoseconds(moment) -> int:
    """A datetime as OpenTelemetry's timestamps: nanoseconds since the epoch."""
    return int(moment.timestamp() * 1_000_000_000)
