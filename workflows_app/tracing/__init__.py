"""OpenTelemetry traces: an execution is one trace.

With OpenTelemetry configured in the host process (the ``[otel]`` extra: ``opentelemetry-api``,
and an SDK that the host sets up), each execution is a trace of

- a span for the execution, from its creation to its end, whose parent is the span that was
  current where it was created (a request's, a command's: a root otherwise);
- a child span for each attempt of each step, recorded by the process that ran it (an agent, or
  a manager for a step that names no agent), current while the operation runs.

Only the API is used (``otel``): its global tracer provider and propagators. Without the API
installed nothing of it is imported and nothing is traced; without a tracer provider set, no
context is chosen and messages carry nothing more.

Why the execution's span is recorded at the end, with an id chosen at the start
------------------------------------------------------------------------------------
A span starts and ends in one process: the SDK holds it in memory and exports it when it ends.
An execution outlives any process (it is started by a request, advanced by any manager, ended
by another, maybe after restarts), so no process can hold its span open. So:

1. When the execution is created (``context.reserve``, the default of
   ``Execution.trace_context``), its span's identity is chosen — the trace id (the current
   span's, or a new one), a new span id, the parent's span id, the sampling decision — and
   stored on its row. Nothing is recorded yet.
2. Each operation message carries that context in its headers (``context.message_headers``,
   through the global propagator); the attempt's span is started in it (``attempts``), so it is
   a child of the execution's span though that span does not exist anywhere yet.
3. When the execution ends (``executions``), the process that ends it records the execution's
   span with the stored ids, its creation as start time and its end as end time.

OpenTelemetry's API cannot give a span an id, so step 3 needs the SDK's cooperation: its
tracer provider's id generator must be :class:`~workflows_app.tracing.ids.ExecutionIdGenerator`,
which hands out the reserved ids for that one span (the repository's project sets it up; a host
project passes it to its ``TracerProvider``). This is the one price of a whole-execution span;
the alternatives were worse: a short span at the start as the attempts' parent (the execution's
duration nowhere), or attempts parented on the request's span (no execution in the trace).

The manager's passes over an execution (the workflow function's runs) have no span of their
own; their log records, and those of an attempt, carry ``execution_id`` (``logs``).
"""

from workflows_app.tracing import executions, logs

logs.install()

__all__ = ["executions", "logs"]
