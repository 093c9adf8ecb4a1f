"""Running one attempt of a local step in the pass' own process: its ``ctx``, its function, and
its timeout, which interrupts it.

The timeout is a ``SIGALRM`` timer where the pass runs in its process' main thread (a manager's
pool process, the test harness): the step is interrupted where it is, even in a ``sleep`` or a
blocking read, by :class:`LocalStepTimeout`, a ``BaseException`` that code catching ``Exception``
does not swallow. Elsewhere (a pass in another thread) nothing can interrupt it: it runs to its
end, and an attempt that outlived its timeout fails all the same.
"""

import contextlib
import math
import signal
import threading
import time
import types
import uuid

from workflows_app import wire
from workflows_app.conf import workflows_settings
from workflows_app.engine import outcomes, reports
from workflows_app.errors import OperationCancelled, RegistrationError
from workflows_app.local_steps import host
from workflows_app.models import Execution, Operation
from workflows_app.registry import get_operation
from workflows_app.states import EXECUTION_CANCELLING, OperationState
from workflows_app.tracing import attempts
from workflows_app.tracing import context as trace_context

#: The error type of an attempt its timeout interrupted (the tick's is the same).
TIMEOUT = "OperationTimeout"


class LocalStepTimeout(BaseException):
    """The step's timeout passed: raised into it by the timer."""


class LocalContext:
    """``ctx`` of a local step: what an agent's operation sees, answered from the database."""

    def __init__(self, operation):
        self._operation = operation
        self.operation_id = uuid.UUID(str(operation.pk))
        self.execution_id = uuid.UUID(str(operation.execution_id))
        self.name = operation.name
        self.attempt = operation.attempt
        #: Where it runs: the manager, by the management queue's name.
        self.agent = workflows_settings.MANAGEMENT_QUEUE

    def is_cancelled(self) -> bool:
        """Whether the execution is being cancelled, or this step was cancelled (or superseded)."""
        if host.current().cancel_requested(self.operation_id, self.attempt):
            return True
        if Execution.objects.filter(pk=self.execution_id, status__in=EXECUTION_CANCELLING).exists():
            return True
        return not Operation.objects.filter(pk=self.operation_id, state=OperationState.STARTED,
                                            attempt=self.attempt).exists()

    def raise_if_cancelled(self):
        if self.is_cancelled():
            raise OperationCancelled(f"{self.name}: the execution is being cancelled")

    def log(self, message, **data):
        """A ``log`` event of the step. ``ValueRefused`` for data that may not be stored."""
        reports.record_log(self.execution_id, self.name, str(message), data)


def run(operation, *, dry_run=False, args=None) -> dict:
    """Run the current attempt of ``operation`` (local, ``started``); what it did, as the fields of
    an ``outcome`` report. ``args``: its positional arguments (``engine.grants.call_args``)."""
    try:
        definition = get_operation(operation.operation)
    except RegistrationError as exc:
        return outcomes.failed(exc, retryable=False)
    if dry_run:
        return {"outcome": wire.Outcome.SUCCEEDED, "result": None}
    seconds = operation.timeout or workflows_settings.LOCAL_STEP_TIMEOUT
    began = time.monotonic()
    args = args if args is not None else operation.args

    def call(ctx, answer):
        return outcomes.call(definition, ctx, args, operation.kwargs)

    try:
        with host.current().running(operation.pk, operation.attempt), _interrupted_after(seconds):
            # In the attempt's span, a child of its execution's, as on an agent.
            outcome = attempts.run(call, LocalContext(operation), {"operation": operation.operation},
                                   _traced(operation.execution))
    except LocalStepTimeout:
        return timed_out(seconds)
    if time.monotonic() - began > seconds and outcome["outcome"] != wire.Outcome.SUCCEEDED:
        return timed_out(seconds)  # it could not be interrupted (not the main thread), and failed late
    return outcome


def _traced(execution):
    """What ``tracing.attempts`` reads of a message's headers, for a step no message carried."""
    return types.SimpleNamespace(**(trace_context.message_headers(execution.trace_context, execution.workflow_id) or {}))


def timed_out(seconds) -> dict:
    return {"outcome": wire.Outcome.FAILED, "retryable": True,
            "error": {"type": TIMEOUT, "message": f"no result within its timeout of {seconds:g}s", "traceback": ""}}


@contextlib.contextmanager
def _interrupted_after(seconds):
    """Raise :class:`LocalStepTimeout` in this thread after ``seconds``, where a timer can. An
    alarm the process had armed (a test runner's own timeout, say) is armed again afterwards with
    the time it had left (one due meanwhile goes off at once then)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def interrupt(signum, frame):
        raise LocalStepTimeout()

    previous = signal.signal(signal.SIGALRM, interrupt)
    began = time.monotonic()
    outer, interval = signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001) if math.isfinite(seconds) else 0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - began), 0.001), interval)
