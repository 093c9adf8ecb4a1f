"""The rules that decide what may happen next, read from the database: whether a new
call (an operation, or a retry) may start, how long a retry waits, how long a workflow whose
code raised waits before its next try, and whether an execution's own timeout passed.

Nothing here writes: the engine asks, then acts (``progress``, ``reports``, ``failures``).
"""

from datetime import timedelta

from workflows_app import clock
from workflows_app.conf import workflows_settings
from workflows_app.models import Event, Operation
from workflows_app.states import EventType, ExecutionStatus, FailureMode, OperationState

#: The longest wait between two tries of a workflow declared ``on_unhandled="retry"`` (s).
WORKFLOW_RETRY_CAP_SECONDS = 600


def unhandled_failures(execution):
    """The execution's operations that failed for good and whose failure the workflow code has
    not handled yet (a handled failure no longer stops new calls)."""
    return Operation.objects.filter(execution_id=execution.pk, state=OperationState.FAILED, failure_handled=False)


def first_unhandled_failure(execution):
    """The name of the execution's earliest failure not handled yet, or None."""
    return unhandled_failures(execution).order_by("failed_at").values_list("name", flat=True).first()


def allows_new_calls(execution, failed=None) -> bool:
    """Whether a new operation (or a retry, which is a new call) may start now: only
    while the execution is started, and in no_new_calls / fail_fast only while no failure is
    left unhandled. ``failed``: whether one is, when the caller knows it already."""
    if execution.status != ExecutionStatus.STARTED:
        return False
    if execution.failure_mode == FailureMode.CONTINUE_WHILE_POSSIBLE:
        return True
    return not (unhandled_failures(execution).exists() if failed is None else failed)


def retry_delay(operation, retry_after=None):
    """Seconds before ``operation``'s next attempt after a retryable failure, or ``None`` when it
    has no retry left. ``retry_after`` (from ``RecoverableError``) replaces its interval."""
    if operation.max_retries != -1 and operation.current_retries >= operation.max_retries:
        return None
    if retry_after is not None:
        return max(0.0, retry_after)
    return max(0.0, operation.retry_interval * operation.retry_backoff ** operation.current_retries)


def workflow_retry_delay(tries) -> float:
    """Seconds before the ``tries``-th try (1, 2, ...) of a workflow whose code raised:
    ``RETRY_INTERVAL``, doubling, at most ``WORKFLOW_RETRY_CAP_SECONDS`` (Axon's recovery)."""
    interval = float(workflows_settings.RETRY_INTERVAL)
    return min(interval * 2 ** min(tries - 1, 32), WORKFLOW_RETRY_CAP_SECONDS)


def timeout_due(execution, now=None) -> bool:
    """Whether the execution's own ``timeout`` has passed, counted from when it last started to
    run: its start, or its latest resume (a resumed execution gets its whole timeout again)."""
    if execution.timeout is None or execution.started_at is None:
        return False
    now, limit = now or clock.now(), timedelta(seconds=execution.timeout)
    if execution.started_at + limit > now:
        return False  # not due even counted from the start: no need to look for a resume (the tick's common case)
    resumed = (Event.objects.filter(execution_id=execution.pk, type=EventType.WORKFLOW_RESUMED)
               .order_by("-id").values_list("timestamp", flat=True).first())
    return resumed is None or resumed + limit <= now
