"""The operation task that agents (and managers, for operations with no agent) run. It opens no
database connection: it speaks to the managers through the broker (``agents.worker.link``).

Authentication: a message that no manager proved for this agent (``workflows_app.wire.keys``:
the proof of its operation id, attempt and grant under the agent's key) is dropped at once —
acknowledged and logged, never run, never sent back to the queue: anyone who may publish to the
agent's queue could have put it there.

The grant: a first delivery of a live grant runs at once, without asking anyone, once this
agent's journal took the attempt (``agents.worker.grants``, ``agents.worker.journal``); its start
is reported, not asked, and its end carries its start. A delivery the journal already knows is
settled here: dropped (stopped, or running here), its outcome sent again (ended here), or its
attempt reported lost (its process gone).

Fencing, for every other delivery: it runs only once a manager, against the database, answered
its claim with ``run`` — the attempt was still its operation's current one, waiting to start, and
its execution running (``agents.intake``). No answer in time: the message goes back to the queue,
never run on a guess. A second delivery of the same attempt — Redis' visibility timeout, a
requeue — is answered ``started``, with the pid of the process whose claim started it: dropped
while that attempt runs somewhere, or while that process of this run still waits for its own
answer (which says the same to it, and it runs the attempt); if it was started by this run of the
agent and no process here runs it any more, its pool process died with it, and the attempt is
reported lost (a retryable failure).

What the attempt did is reported (with the agent's proof) before the message is acknowledged
(the task ends only once the broker holds the report); a report the broker does not take
sends the message back to the queue, where its next delivery finds the attempt lost.

Then the task ends as the attempt did, in Celery's own terms, so that Celery's events and Flower
tell the attempts apart: it returns when the attempt succeeded (state ``SUCCESS``), raises
``celery.exceptions.Retry`` when the engine will send another attempt (``RETRY``: Celery sends
nothing itself, the next attempt is the engine's message, with a task id of its own) and
:class:`AttemptFailed` otherwise (``FAILURE``). Either way the message is acknowledged
(``acks_on_failure_or_timeout``), nothing is written to a result backend (``ignore_result``) and
the worker logs one line: :class:`AttemptFailed` is declared in the task's ``throws``. A delivery
that runs nothing — dropped by its claim, a duplicate of a running attempt — returns: its
message was handled and nothing failed.
"""

import logging
import os
import time
import uuid

from celery import shared_task
from celery.exceptions import Reject, Retry
from celery.signals import task_revoked

from agents.worker import deaths, grants, journal, link, local
from workflows_app import values, wire
from workflows_app.broker import RUNNER_TASK, TASK_OPTIONS
from workflows_app.engine import outcomes
from workflows_app.errors import OperationCancelled, RegistrationError
from workflows_app.registry import get_operation
from workflows_app.tracing import attempts
from workflows_app.wire import keys

logger = logging.getLogger(__name__)

#: The longest error line a failed task carries to Celery's events (the whole error is in the
#: database).
ERROR_LINE_CHARS = 500


class AttemptFailed(Exception):
    """How the task of an attempt that failed ends, once its outcome was reported: state
    ``FAILURE``, with the operation's error as ``<type>: <message>`` on one line."""


class AttemptCancelled(AttemptFailed):
    """The task of an attempt that stopped because its execution (or step) is being cancelled
    (``OperationCancelled``): ``FAILURE`` too. Celery's ``REVOKED`` means that a message was
    revoked or its process terminated, which is not what happened: the attempt ran, and stopped."""


class OperationContext:
    """``ctx`` of an operation function."""

    def __init__(self, operation_id, attempt, answer):
        self.operation_id = uuid.UUID(str(operation_id))
        self.execution_id = uuid.UUID(answer["execution"])
        self.name = answer["step"]
        self.attempt = attempt
        #: The agent that runs it: the name of the queue it came from (on a manager, the management queue's).
        self.agent = local.name()

    def is_cancelled(self) -> bool:
        """Whether the execution is being cancelled (or this step was): a manager asked this
        worker so, through the broker (``agents.worker.control``)."""
        return local.cancel_requested(local.attempt_key(self.operation_id, self.attempt))

    def raise_if_cancelled(self):
        if self.is_cancelled():
            raise OperationCancelled(f"{self.name}: the execution is being cancelled")

    def log(self, message, **data):
        """A ``log`` event of the operation. ``ValueRefused`` for data that may not be stored."""
        values.check(data, "the log's data")
        link.report(wire.Kind.LOG, operation=str(self.operation_id), attempt=self.attempt,
                    message=values.clean_text(str(message)), data=data)


@shared_task(name=RUNNER_TASK, throws=(AttemptFailed,), Request=deaths.OperationRequest, **TASK_OPTIONS)
def run_operation(operation_id, attempt, proof=None, grant=None, **unexpected):
    if unexpected or not _proved(operation_id, attempt, proof, grant):
        logger.warning("dropped a message of operation %.64r attempt %.16r that no manager proved for agent %s",
                       operation_id, attempt, local.name())
        return
    key = local.attempt_key(operation_id, attempt)
    answer = _granted(operation_id, attempt, key, grant) if grant is not None else None
    if answer is None:
        if _seen_here(operation_id, attempt, key):
            return
        local.mark_claiming(key)
        try:
            answer = _admitted(operation_id, attempt, key)
        finally:
            local.clear_claiming(key)  # once it is recorded running, when it runs
        if answer is None:
            return
    # An attempt that ran unasked: its end carries its start (the managers may not have it yet).
    start = answer.pop("unasked", {})
    try:
        ctx = OperationContext(operation_id, attempt, answer)
        outcome = attempts.run(_run, ctx, answer, run_operation.request)  # in the attempt's span
        terminated = outcome.pop("terminated", None)
        if outcome.pop("lost", False):  # SystemExit, KeyboardInterrupt, SIGTERM (agents.worker.deaths)
            _report_or_requeue(wire.Kind.LOST, operation_id, attempt, message=outcome["error"]["message"], **start)
        else:
            outcome.update(start)
            _report_or_requeue(wire.Kind.OUTCOME, operation_id, attempt, **outcome)
            # Kept with the attempt's finished record: sent again if this report is lost on its way.
            local.remember_outcome(key, {"operation": str(operation_id), "attempt": attempt, **outcome})
        journal.end(key)
        cancelled = ctx.is_cancelled()  # read before mark_done, which clears it
    finally:
        local.mark_done(key)
    if terminated is not None:
        raise terminated  # the process ends, as its SIGTERM asks (billiard lets it go once it gets there)
    error = _task_error(outcome, attempt, answer, cancelled=cancelled)
    if error is not None:
        raise error


def _proved(operation_id, attempt, proof, grant) -> bool:
    """Whether a manager sent this message to this agent: its proof covers the attempt and the
    whole of its grant."""
    document = [operation_id, attempt] if grant is None else [operation_id, attempt, grant]
    return keys.proven(proof, link.own_key(), keys.Purpose.OPERATION, document) and (
        grant is None or grants.is_grant(grant))


def _granted(operation_id, attempt, key, grant):
    """The grant, as a claim's answer, when this delivery runs the attempt unasked (recorded
    running here, its start reported); None when it must claim it (``agents.worker.grants``)."""
    why = grants.why_asked(grant, run_operation.request.delivery_info)
    if why is None and not journal.begin(key):
        why = "this agent's journal has it (started here before, or stopped)"
    if why is not None:
        logger.info("operation %s attempt %s claimed: %s", operation_id, attempt, why)
        return None
    local.mark_running(key)
    began = time.time()
    link.started(operation_id, attempt, began)
    return {"verdict": wire.Verdict.RUN, **grant, "unasked": {"started": os.getpid(), "started_at": began}}


def _seen_here(operation_id, attempt, key) -> bool:
    """Whether this agent's journal settles a delivery that may not run unasked: one that a
    manager stopped is dropped; one of an attempt that started here is dropped while it runs, its
    outcome sent again once it ended (the managers may still have it ``sent``: its report was
    lost), and the attempt reported lost — its task failing — when its process is gone or its
    outcome no longer known. False when the journal does not have it: the delivery claims it."""
    entry = journal.read(key)
    if entry is None:
        return False
    if entry == journal.STOP:
        return _dropped(operation_id, attempt, "a manager stopped it before it started")
    earlier = None if entry == journal.END else local.earlier_delivery(operation_id, attempt)  # waits a moment
    if earlier == local.Delivery.RUNNING:
        return _dropped(operation_id, attempt, "a duplicate delivery of an attempt running on this agent")
    if entry == journal.END or earlier == local.Delivery.FINISHED:
        kept = local.kept_outcome(key, ended_before=0)
        if kept is not None:
            # Stored twice changes nothing; its start with it, should the managers not have that either.
            fields = {name: value for name, value in kept.items() if name not in ("operation", "attempt", "secret")}
            _report_or_requeue(wire.Kind.OUTCOME, operation_id, attempt, **fields)  # with its start, if unasked
            return _dropped(operation_id, attempt, "a duplicate delivery of an attempt that ended on this agent")
    lost = {"outcome": wire.Outcome.FAILED, "retryable": True,
            "error": {"type": "WorkerLost", "message": "its worker process was lost"}}
    # It began here (the journal says so), which the managers may not know: its start was to be
    # reported by the process that is gone. Its loss carries it, in one report.
    pid, began = journal.began(key)
    _report_or_requeue(wire.Kind.LOST, operation_id, attempt, message=lost["error"]["message"], started=pid,
                       started_at=began)
    journal.end(key)
    raise _task_error(lost, attempt, {}, cancelled=False)


def _dropped(operation_id, attempt, why) -> bool:
    """A delivery dropped here: logged, and told to its execution's events (a ``log`` report)."""
    logger.info("operation %s attempt %s dropped: %s", operation_id, attempt, why)
    try:
        link.report(wire.Kind.LOG, operation=str(operation_id), attempt=attempt,
                    message=f"delivery of attempt {attempt} dropped: {why}", data={"attempt": attempt, "fenced": True})
    except link.Unreachable as exc:  # only its note is lost
        logger.warning("%s", exc)
    return True


def _admitted(operation_id, attempt, key):
    """The managers' answer when this delivery runs the attempt (recorded running here), None
    when it is dropped; raises ``Reject`` (back to the queue) when no manager answered, and the
    task's error when the attempt is found lost."""
    answer = link.claim(operation_id, attempt, link.claim_seconds())
    if answer is None:
        raise Reject("no manager answered the claim", requeue=True)
    verdict = answer.get("verdict")
    if verdict == wire.Verdict.STARTED:
        claimed_by = answer.get("pid") if type(answer.get("pid")) is int else None
        earlier = local.earlier_delivery(operation_id, attempt, claimed_by) \
            if answer.get("incarnation") == local.incarnation() else None
        if earlier == local.Delivery.DIED:
            # Our own earlier delivery of this attempt died with its pool process: this task
            # (the attempt's task id) ends as the retryable failure the managers record.
            lost = {"outcome": wire.Outcome.FAILED, "retryable": True,
                    "error": {"type": "WorkerLost", "message": "its worker process was lost"}}
            _report_or_requeue(wire.Kind.LOST, operation_id, attempt, message=lost["error"]["message"])
            raise _task_error(lost, attempt, answer, cancelled=False)
        if earlier != local.Delivery.NEVER_RAN:
            logger.info("operation %s attempt %s dropped: a duplicate delivery of a started attempt", operation_id, attempt)
            return None
        # Nothing here ran it: the claim that started it was this process' own, whose answer was
        # lost (a manager stored it and died, an answer lost on its way), or its process gave it
        # up or died before it ran it. It runs now.
        logger.info("operation %s attempt %s: its claim's answer was lost; it runs now", operation_id, attempt)
    elif verdict != wire.Verdict.RUN:
        logger.info("operation %s attempt %s dropped: %s", operation_id, attempt, answer.get("reason", verdict))
        journal.stop(key)  # no delivery of it here ever starts it: the managers release its grant
        return None
    local.mark_running(key)
    journal.note_started(key)
    return answer


def _task_error(outcome, attempt, answer, *, cancelled):
    """What the task raises to end as the attempt ended (its outcome is reported already):
    nothing when it succeeded; ``Retry`` when the managers will retry it; else
    :class:`AttemptFailed`.

    The managers retry a retryable failure while the operation has retries left, which the
    claim's answer says (``retries_left``, -1 for no limit; an answer without it says none),
    and while the execution takes new calls: not when it is being cancelled, which this worker
    was told (``cancelled``). A retry that another step's failure stops (fail_fast,
    no_new_calls) cannot be known here: that task shows ``RETRY`` and no next attempt follows."""
    if outcome["outcome"] == wire.Outcome.SUCCEEDED:
        return None
    line = _error_line(outcome["error"])
    if outcome["outcome"] == wire.Outcome.CANCELLED:
        return AttemptCancelled(f"cancelled: {line}")
    if outcome["retryable"] and answer.get("retries_left", 0) != 0 and not cancelled:
        # Raised, not task.retry(): Celery sends no message for it (the engine sends the next
        # attempt) and, the task being acks_late, acknowledges this one.
        return Retry(f"retried as attempt {attempt + 1}: {line}", exc=AttemptFailed(line))
    return AttemptFailed(line)


def _error_line(error) -> str:
    """``<type>: <message>`` of an operation's error, on one line."""
    line = " ".join(f"{error.get('type') or 'Error'}: {error.get('message', '')}".split())
    return line if len(line) <= ERROR_LINE_CHARS else line[:ERROR_LINE_CHARS - 1] + "…"


def _run(ctx, answer) -> dict:
    """Run the operation; what it did, as the fields of an ``outcome`` report."""
    try:
        definition = get_operation(answer["operation"])
    except RegistrationError as exc:
        return outcomes.failed(exc, retryable=False)
    if answer.get("dry_run"):
        return {"outcome": wire.Outcome.SUCCEEDED, "result": None}
    pid = os.getpid()
    try:
        return outcomes.call(definition, ctx, answer["args"], answer["kwargs"])
    except BaseException as exc:  # SystemExit, KeyboardInterrupt: the attempt is lost, the pool process lives on
        if isinstance(exc, GeneratorExit) or os.getpid() != pid:  # or a process the operation forked, which exits
            raise
        # But the SystemExit of a SIGTERM: once the attempt is reported lost, it ends the process.
        terminated = exc if deaths.terminating() else None
        message = deaths.terminated(pid) if terminated else deaths.raised(exc)
        return {"outcome": wire.Outcome.FAILED, "retryable": True, "lost": True, "terminated": terminated,
                "error": {"type": "WorkerLost", "message": message}}


def _report_or_requeue(kind, operation_id, attempt, **fields):
    try:
        link.report(kind, operation=str(operation_id), attempt=attempt, **fields)
    except link.Unreachable as exc:
        # Back to the queue: its next delivery finds the attempt started here and gone (lost).
        logger.error("%s of attempt %s of %s not reported (%s): its message goes back to the queue", kind, attempt,
                     operation_id, exc)
        raise Reject(str(exc), requeue=True) from None


@task_revoked.connect
def _revoked(request=None, terminated=False, **kwargs):
    """A message Celery discarded because its id was revoked: that attempt is lost (retryable),
    so a revoked member never leaves its fan-in waiting."""
    if request is None or getattr(request, "task", None) != RUNNER_TASK:
        return
    try:
        operation_id, attempt = request.args[0], int(request.args[1])
        kwargs = request.kwargs or {}
        if not _proved(operation_id, attempt, kwargs.get("proof"), kwargs.get("grant")):
            return  # not a message a manager sent: nothing to report
        link.report(wire.Kind.LOST, operation=str(operation_id), attempt=attempt,
                    message="its Celery message was revoked")
    except Exception:  # a signal handler must not take the worker down
        logger.exception("could not report the revoke of %s", getattr(request, "id", "?"))
