"""The demo project's OpenTelemetry SDK, set up from the standard ``OTEL_*`` variables when
``OTEL_TRACES_EXPORTER`` names an exporter (the apps themselves use only the API:
``workflows_app.tracing``).

``OTEL_TRACES_EXPORTER``: a comma-separated list of exporters — ``console`` (each span as one
line of JSON on standard output, written as it ends), ``otlp`` (OTLP over gRPC, or over HTTP with
``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``: :func:`exporter_class`), or any other exporter
installed under the SDK's ``opentelemetry_traces_exporter`` entry points (their own variables
configure them: ``OTEL_EXPORTER_OTLP_ENDPOINT``...); ``none`` or unset: no SDK. The SDK reads
the rest itself: ``OTEL_SERVICE_NAME`` (default here: ``switchyard``),
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``; the API reads
``OTEL_PROPAGATORS``.

The tracer provider's id generator is Switchyard's (``ExecutionIdGenerator``): an execution's
span gets the id its attempts' spans name as their parent.
"""

import os
import sys
from importlib.metadata import entry_points

from celery.signals import worker_process_shutdown
from django.core.exceptions import ImproperlyConfigured

#: The variable that turns the SDK on, and the exporter written here rather than loaded.
EXPORTER_VARIABLE = "OTEL_TRACES_EXPORTER"
CONSOLE = "console"
DEFAULT_SERVICE_NAME = "switchyard"
#: ``otlp``'s exporter for each OTLP protocol, and the package that provides each.
OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
OTLP_PACKAGES = {"otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
                 "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http"}


def exporter_names(environ=None) -> list[str]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (``none`` and blanks left out)."""
    value = (environ if environ is not None else os.environ).get(EXPORTER_VARIABLE, "")
    return [name.strip() for name in value.split(",") if name.strip() and name.strip().lower() != "none"]


def configure_or_exit():
    """:func:`configure`, at the start of every process of the project; a process whose
    ``OTEL_*`` variables ask for what is not installed stops at once, with a one-line error."""
    try:
        return configure()
    except ImproperlyConfigured as exc:
        sys.exit(f"switchyard: {exc}")


def configure(environ=None, *, out=None, set_global=True):
    """Set up the SDK's tracer provider from the environment (``environ``: ``os.environ``) and
    make it the global one (``set_global``). Returns it, or None when no exporter is named.
    Raises ``ImproperlyConfigured`` (one line: what is missing) when the SDK or a named exporter
    is not installed. ``out``: where ``console`` writes (standard output)."""
    names = exporter_names(environ)
    if not names:
        return None
    try:  # the SDK is optional (the [otel] extra): imported only when asked for
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as exc:
        raise ImproperlyConfigured(f"{EXPORTER_VARIABLE} is set but OpenTelemetry's SDK is not installed "
                                   f"(pip install 'django-switchyard[otel]'): {exc}") from None
    from workflows_app.tracing.ids import ExecutionIdGenerator

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource, id_generator=ExecutionIdGenerator())
    for name in names:
        if name == CONSOLE:
            # One line per span, written as it ends: several processes may share one output.
            exporter = ConsoleSpanExporter(out=out or sys.stdout,
                                           formatter=lambda span: span.to_json(indent=None) + os.linesep)
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter_class(name, environ)()))
    if set_global:
        trace.set_tracer_provider(provider)
        _flush_when_pool_processes_exit(provider)
    return provider


def exporter_class(name, environ=None):
    """The exporter ``name`` stands for: ``otlp`` is OTLP over the protocol the environment names
    (``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``grpc``, the
    default, or ``http/protobuf``), as the SDK's own set-up reads it; any other name is an entry
    point of ``opentelemetry_traces_exporter``."""
    environ = environ if environ is not None else os.environ
    asked = name
    if name == "otlp":
        protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                    or "grpc").strip()
        if protocol not in OTLP_BY_PROTOCOL:
            raise ImproperlyConfigured(f"the OTLP protocol {protocol!r} is not one of {sorted(OTLP_BY_PROTOCOL)}")
        name = OTLP_BY_PROTOCOL[protocol]
    found = list(entry_points(group="opentelemetry_traces_exporter", name=name))
    if not found:
        package = f" (pip install {OTLP_PACKAGES[name]})" if name in OTLP_PACKAGES else ""
        raise ImproperlyConfigured(f"{EXPORTER_VARIABLE} names {asked!r}, which no installed package provides{package}")
    return found[0].load()


def _flush_when_pool_processes_exit(provider):
    """A Celery pool process ends without running ``atexit`` (where the SDK flushes the spans a
    batch processor still holds): flush them when it shuts down."""
    def flush(**kwargs):
        provider.force_flush()

    worker_process_shutdown.connect(flush, weak=False)
