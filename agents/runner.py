"""The operation task that agents (and managers, for operations with no agent) run.

Fencing (SPEC §5): an attempt starts only if it is still the operation's current attempt, the
operation is waiting for it (sending/sent), and the execution is running. A second delivery
of the same attempt — Redis' visibility timeout, a requeue — finds the attempt started and is
dropped while that attempt still runs somewhere; if its process is gone, the attempt was lost,
which is a retryable failure. This, not Celery's in-memory revoke list, is what keeps a
message from running twice.

A database outage (SPEC §9, ``workflows_app.outages``) is ridden out at both ends: a delivery
waits to be claimed until the database answers (so this process takes no other message, and
the rest stay in the broker); a finished attempt keeps its result and reports it, with its
attempt, when the database is back — fencing decides then as always. Past
DATABASE_OUTAGE_TOLERANCE a delivery not claimed goes back to the queue, and a report not
written is given up (logged at CRITICAL): its attempt is lost, a retryable failure, once a
manager sees that no worker runs it.
"""

import itertools
import logging
import os
import time
import traceback

from celery import shared_task
from celery.exceptions import Reject
from celery.signals import task_revoked
from django.db import InterfaceError, OperationalError

from agents.worker import local
from workflows_app import outages
from workflows_app.dispatch import RUNNER_TASK, TASK_OPTIONS
from workflows_app.engine import reports
from workflows_app.engine.graph import resolve
from workflows_app.errors import DatabaseUnavailable, NonRecoverableError, OperationCancelled, RecoverableError, RegistrationError, TransitionRefused
from workflows_app.models import Execution, Operation
from workflows_app.registry import get_operation
from workflows_app.states import EXECUTION_CANCELLING, EventType, ExecutionStatus, OperationState
from workflows_app.transitions import claim_operation, operation_transition, record_event

logger = logging.getLogger(__name__)


class OperationContext:
    """``ctx`` of an operation function."""

    def __init__(self, operation):
        self._operation = operation
        self.operation_id = operation.pk
        self.execution_id = operation.execution_id
        self.name = operation.name
        self.attempt = operation.attempt

    def is_cancelled(self) -> bool:
        """Whether the execution is being cancelled (or this step was). While the database is
        unreachable nobody can have cancelled anything: False, and the operation goes on."""
        try:
            status = Execution.objects.filter(pk=self.execution_id).values_list("status", flat=True).first()
            state = Operation.objects.filter(pk=self.operation_id).values_list("state", flat=True).first()
        except (OperationalError, InterfaceError) as exc:
            if not outages.is_outage(exc):
                raise
            outages.close_connections()
            return False
        return status in EXECUTION_CANCELLING or status is None or state == OperationState.CANCELLED

    def raise_if_cancelled(self):
        if self.is_cancelled():
            raise OperationCancelled(f"{self.name}: the execution is being cancelled")

    def log(self, message, **data):
        """A ``log`` event of the operation. ``ValueRefused`` for data that may not be stored."""
        outages.ride_out(f"logging for {self.name}", reports.record_log, self.execution_id, self.name, message, data)


@shared_task(name=RUNNER_TASK, **TASK_OPTIONS)
def run_operation(operation_id, attempt):
    try:
        claimed = outages.ride_out(f"claiming attempt {attempt} of {operation_id}", _claim_delivery, operation_id, attempt)
        if claimed is None:
            return
        operation, dry_run = claimed
        key = local.attempt_key(operation.pk, attempt)
        local.mark_running(key)
        try:
            _run(operation, attempt, dry_run)
        finally:
            local.mark_done(key)
    except DatabaseUnavailable:
        # Back to the queue: claimed again when the database answers, or, if it was claimed
        # here and its report given up, found lost then (its process is gone).
        raise Reject("the database is unavailable", requeue=True) from None


def _claim_delivery(operation_id, attempt):
    """The operation and whether it is a dry run, if this delivery may start it; else None."""
    # The common case in one statement: the attempt is current, sent, its execution started.
    operation = claim_operation(operation_id, attempt, incarnation=local.incarnation(), data=_claim_data())
    if operation is not None:
        return operation, operation.dry_run
    # anything else: load it, and start it or say why not
    operation = Operation.objects.select_related("execution").filter(pk=operation_id).first()
    if operation is None:
        logger.warning("operation %s does not exist: message dropped", operation_id)
        return None
    if not _claim(operation, attempt):
        return None
    return operation, operation.execution.is_dry_run


def _claim_data():
    return {"agent": local.name(), "incarnation": local.incarnation(), "pid": os.getpid()}


def _drop(operation, attempt, why):
    logger.info("operation %s attempt %s dropped: %s", operation.pk, attempt, why)
    record_event(operation.execution_id, EventType.LOG, f"delivery of attempt {attempt} dropped: {why}",
                 {"attempt": attempt, "fenced": True}, operation=operation.name)
    return False


def _claim(operation, attempt) -> bool:
    """Fencing: move the attempt to ``started`` if, and only if, it may start here."""
    if attempt != operation.attempt:
        return _drop(operation, attempt, f"attempt {operation.attempt} is current")
    if operation.execution.status != ExecutionStatus.STARTED:
        return _drop(operation, attempt, f"the execution is {operation.execution.status}")
    if operation.state == OperationState.STARTED:
        if operation.incarnation == local.incarnation() and not local.running_here(operation.pk, attempt):
            # Our own earlier delivery of this attempt died with its pool process.
            reports.record_lost(operation, attempt, "its worker process was lost")
            return False
        return _drop(operation, attempt, "a duplicate delivery of a started attempt")
    if operation.state == OperationState.SENDING:
        # The message overtook the sender's own sending -> sent write; the two race, and
        # whichever loses must not drop the attempt: either way it is now sent.
        try:
            operation_transition(operation, OperationState.SENT, attempt=attempt)
        except TransitionRefused:
            operation.refresh_from_db(fields=["state", "attempt", "incarnation"])
            if operation.attempt != attempt or operation.state != OperationState.SENT:
                return _drop(operation, attempt, f"it is {operation.state} (attempt {operation.attempt}) now")
    try:
        operation_transition(operation, OperationState.STARTED, attempt=attempt, incarnation=local.incarnation(),
                             data=_claim_data())
    except TransitionRefused as refused:
        return _drop(operation, attempt, str(refused))
    return True


def _run(operation, attempt, dry_run):
    try:
        definition = get_operation(operation.operation)
    except RegistrationError as exc:
        return _report(reports.record_failure, operation, attempt, _error(exc), retryable=False)
    args = list(operation.args)
    if operation.input is not None:
        args.insert(0, outages.ride_out(f"loading the input of {operation.name}", _load_input, operation))
    if dry_run:
        return _report(reports.record_success, operation, attempt, None)
    try:
        result = definition.func(OperationContext(operation), *args, **operation.kwargs)
    except OperationCancelled as exc:
        return _report(reports.record_cancelled, operation, attempt, _error(exc))
    except RecoverableError as exc:
        return _report(reports.record_failure, operation, attempt, _error(exc), retryable=True, retry_after=exc.retry_after)
    except NonRecoverableError as exc:
        return _report(reports.record_failure, operation, attempt, _error(exc), retryable=False)
    except Exception as exc:
        return _report(reports.record_failure, operation, attempt, _error(exc), retryable=isinstance(exc, definition.retry_for or ()))
    _report(reports.record_success, operation, attempt, result)


#: Tries of a report whose transaction the database aborted (a deadlock, a serialization
#: failure, SQLite's busy lock): it wrote nothing, and unreported its operation stays started.
REPORT_TRIES = 5
TRANSIENT_SQLSTATES = {"40P01", "40001"}


def _report(record, operation, attempt, *args, **kwargs):
    """Record what the attempt did, riding out a database outage (the result is kept until the
    database answers; past DATABASE_OUTAGE_TOLERANCE, DatabaseUnavailable: given up)."""
    tries = itertools.count()

    def once():
        if next(tries):
            operation.refresh_from_db()  # what the failed transaction set in memory never happened
        return _report_once(record, operation, attempt, *args, **kwargs)

    return outages.ride_out(f"reporting attempt {attempt} of {operation.pk}", once)


def _report_once(record, operation, attempt, *args, **kwargs):
    for tries in range(1, REPORT_TRIES + 1):
        try:
            return record(operation, attempt, *args, **kwargs)
        except OperationalError as exc:
            transient = (getattr(exc.__cause__, "sqlstate", None) in TRANSIENT_SQLSTATES
                         or "database is locked" in str(exc))
            if not transient or tries == REPORT_TRIES:
                raise
            logger.warning("report of %s attempt %s aborted (%s): trying again", operation.pk, attempt, exc)
            time.sleep(0.05 * tries)
            operation.refresh_from_db()  # what the aborted transaction set in memory never happened


def _load_input(operation):
    results = dict(Operation.objects.filter(execution_id=operation.execution_id, name__in=_input_names(operation.input))
                   .values_list("name", "result"))
    return resolve(operation.input, results)


def _input_names(data):
    if "result" in data:
        return [data["result"]]
    return [name for item in data["list"] for name in _input_names(item)]


def _error(exc):
    return {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}


@task_revoked.connect
def _revoked(request=None, terminated=False, **kwargs):
    """A message Celery discarded because its id was revoked: that attempt is lost (retryable),
    so a revoked member never leaves its fan-in waiting."""
    if request is None or getattr(request, "task", None) != RUNNER_TASK:
        return
    try:
        operation_id, attempt = request.args[0], int(request.args[1])
        operation = Operation.objects.filter(pk=operation_id).first()
        if operation is None or operation.attempt != attempt or operation.is_terminal:
            return
        if operation.state == OperationState.SENDING:
            operation_transition(operation, OperationState.SENT, attempt=attempt)
        reports.record_lost(operation, attempt, "its Celery message was revoked")
    except Exception:  # a signal handler must not take the worker down
        logger.exception("could not record the revoke of %s", getattr(request, "id", "?"))
