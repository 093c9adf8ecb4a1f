"""``python -m bench.tracing [--attempts N] [--rounds R]``: what OpenTelemetry tracing
(``workflows_app.tracing``) adds to an attempt and to an execution's end.

An attempt, in one process: the manager's side (the execution's context into the message's
headers) and the agent's (the context read back, the attempt's span around the runner's call of
a no-op operation, its outcome on the span, ``execution_id`` on log records) — against the same
without a tracer provider, Switchyard's default. With tracing, the SDK's tracer provider with
Switchyard's id generator and a batch span processor (what an OTLP exporter runs behind) whose
exporter drops every span: the cost of tracing, not of an exporter. No broker, no claim, no
report: those cost the same either way. Medians of ``--rounds`` rounds of ``--attempts`` each.

An execution's end: recording its span (``executions.record``, one query: was it resumed), on
the configured database, in a transaction rolled back at the end.
"""

import argparse
import os
import statistics
import sys
import time
import uuid
from types import SimpleNamespace


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.tracing", description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=5000, help="N: attempts of each round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if min(args.attempts, args.rounds) < 1:
        parser.error("--attempts and --rounds must be at least 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    os.environ.setdefault("DJANGO_DEBUG", "false")
    os.environ.pop("OTEL_TRACES_EXPORTER", None)  # this benchmark sets the SDK up itself
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    except ImportError:
        parser.error("needs OpenTelemetry's SDK: pip install 'django-switchyard[otel]'")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from agents import runner
    from workflows_app import clock
    from workflows_app.models import Execution
    from workflows_app.sdk import operation
    from workflows_app.states import ExecutionStatus
    from workflows_app.tracing import attempts, context, executions, ids

    @operation(name="bench_tracing_noop")
    def noop(ctx):
        return None

    class Dropping(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    ctx = SimpleNamespace(operation_id=uuid.uuid4(), execution_id=uuid.uuid4(), name="noop", attempt=1, agent="bench")
    answer = {"operation": "bench_tracing_noop", "args": [], "kwargs": {}}

    def attempt(stored):
        # The manager's side, then the agent's (Celery hands the headers over as request attributes).
        request = SimpleNamespace(**(context.message_headers(stored, "bench") or {}))
        # The runner's own call of the operation, as run_operation makes it.
        return attempts.run(runner._run, ctx, answer, request)

    def per_attempt(stored) -> float:
        samples = []
        for _ in range(args.rounds + 1):  # the first round warms up: not counted
            began = time.perf_counter()
            for _ in range(args.attempts):
                attempt(stored)
            samples.append((time.perf_counter() - began) / args.attempts)
        return statistics.median(samples[1:])

    untraced = per_attempt(context.reserve())  # no tracer provider: "" (not traced)
    provider = TracerProvider(id_generator=ids.ExecutionIdGenerator())
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    trace.set_tracer_provider(provider)
    traced = per_attempt(context.reserve())
    print(f"an attempt (headers, span, runner's call of a no-op), {args.rounds} rounds of {args.attempts}: "
          f"untraced {untraced * 1e6:.1f} µs, traced {traced * 1e6:.1f} µs: +{(traced - untraced) * 1e6:.1f} µs "
          f"({traced / untraced:.2f} × untraced)")

    call_command("migrate", verbosity=0)
    with transaction.atomic():
        execution = Execution.objects.create(workflow_id="bench", status=ExecutionStatus.COMPLETED,
                                             started_at=clock.now(), ended_at=clock.now())
        samples = []
        for _ in range(args.rounds + 1):
            began = time.perf_counter()
            for _ in range(100):
                executions.record(execution, ExecutionStatus.COMPLETED)
            samples.append((time.perf_counter() - began) / 100)
        transaction.set_rollback(True)
    recorded = statistics.median(samples[1:])
    print(f"an execution's end, {connection.vendor}: its span recorded in {recorded * 1e6:.0f} µs (one query)")
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
