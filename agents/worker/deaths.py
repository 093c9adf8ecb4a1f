"""A pool process that goes under an operation: the attempt it ran is lost (a retryable failure,
which the operation's retry policy may retry), and its agent says so at once, naming what
ended it.

* An operation that raises ``SystemExit`` (``exit()``, ``sys.exit()``) or ``KeyboardInterrupt``
  would end its pool process, as Celery lets it. The runner catches them around the operation's
  call and reports the attempt lost instead, naming the exception (:func:`raised`); the pool
  process carries on. The ``SystemExit`` of a SIGTERM (:func:`terminating`: a kill, or anyone's
  ``kill``) reports the attempt lost too, and then ends the process, as the signal asks.
* A pool process killed (SIGKILL: the out-of-memory killer) or exiting by itself (``os._exit``,
  a crash) is noticed by the worker's main process, where Celery's prefork pool fails its task
  with billiard's ``WorkerLostError``. :class:`OperationRequest`, the runner task's request
  class in the main process, then reports the attempt lost, naming the signal or the exit
  code, if the agent's records (``local``) say that process ran it; the message is acknowledged
  rather than given back to the queue, and the task ends ``FAILURE`` with one line in the log.
  A process that went before it started the attempt (its claim unanswered) or after it ended it
  leaves the message to Celery, which gives it back to the queue: its next delivery finds out
  what became of the attempt (``agents.runner``'s fencing), and so does a delivery whose lost
  report the broker did not take.

The request class is named by the runner task itself, so the main process of every worker that
runs operations (an agent, a manager) uses it; the pool processes never do.
"""

import logging
import re
import uuid

import billiard.common
from billiard.einfo import ExceptionInfo, ExceptionWithTraceback
from billiard.exceptions import WorkerLostError
from celery.worker.request import Request

from agents.worker import link, local
from workflows_app import wire

logger = logging.getLogger(__name__)

#: What billiard's ``WorkerLostError`` says of the process: "Worker exited prematurely:
#: signal 9 (SIGKILL) Job: 3." or "... exitcode 1 Job: 3."
_SIGNAL = re.compile(r"\bsignal (\d+) \((\w+)\)")
_EXITCODE = re.compile(r"\bexitcode (-?\d+)")


class PoolProcessLost(Exception):
    """How the task of an attempt whose pool process went ends in the worker's main process once
    the attempt was reported lost: ``FAILURE``, with what ended the process."""


def raised(exc) -> str:
    """The error message of an attempt lost because its operation raised ``exc`` (a
    ``SystemExit`` or a ``KeyboardInterrupt``), which names it with its arguments:
    ``SystemExit(1)`` for ``exit(1)``, ``SystemExit`` for a bare ``raise SystemExit``."""
    return f"the operation raised {_named(exc)}, which would have ended its pool process"


def terminating() -> bool:
    """Whether this pool process got SIGTERM (a kill of its process group, its worker's shutdown):
    billiard's handler then raises ``SystemExit`` on its way out, which is not the operation's own
    and must end the process, as the kill asks. Caught, it would leave the process running
    (billiard only exits on it when it reaches billiard)."""
    fired = getattr(billiard.common, "terminate_handler_fired", None)
    return fired() if fired is not None else bool(billiard.common._should_have_exited[0])  # billiard < 4.3


def terminated(pid) -> str:
    """The error message of an attempt whose pool process ``pid`` got SIGTERM."""
    return f"its pool process (pid {pid}) got SIGTERM"


def _named(exc) -> str:
    name = type(exc).__name__
    return f"{name}({', '.join(repr(arg) for arg in exc.args)})" if exc.args else name


def ended(exc, pid) -> str:
    """What ended the pool process ``pid``, from the ``WorkerLostError`` ``exc``."""
    text = str(exc)
    if match := _SIGNAL.search(text):
        return f"its pool process (pid {pid}) was killed by signal {match[1]} ({match[2]})"
    if match := _EXITCODE.search(text):
        return f"its pool process (pid {pid}) exited with code {match[1]}"
    return f"its pool process (pid {pid}) was lost: {text}"


def report_lost_process(request, exc):
    """Report lost the attempt of ``request`` (a runner task's, in the main process) whose pool
    process went (``exc``: the ``WorkerLostError``), if the agent's records say that process ran
    it. Returns the report's message, or None when nothing was reported."""
    pid = request.worker_pid
    try:  # from the message: checked before it names a record
        operation_id, attempt = str(uuid.UUID(str(request.args[0]))), int(request.args[1])
    except (IndexError, TypeError, ValueError):
        return None
    key = local.attempt_key(operation_id, attempt)
    # Pool processes lead their own process groups: the record names the process itself. No
    # record of it: the attempt had not started there, or it had ended; an outcome kept: it had
    # reported how it ended.
    if pid is None or local.process_group_of(key) != pid or local.kept_outcome(key, 0) is not None:
        return None
    message = ended(exc, pid)
    try:
        link.report(wire.Kind.LOST, operation=operation_id, attempt=attempt, message=message)
    except Exception as error:  # noqa: BLE001 — the message goes back to the queue: its next delivery reports it
        logger.error("attempt %s of %s: %s; not reported (%s): its message goes back to the queue", attempt,
                     operation_id, message, error)
        return None
    logger.warning("attempt %s of %s lost: %s", attempt, operation_id, message)
    return message


class OperationRequest(Request):
    """The runner task's request in a worker's main process: the attempt of a pool process that
    goes under it is reported lost at once (:func:`report_lost_process`)."""

    def on_failure(self, exc_info, send_failed_event=True, return_ok=False):
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        lost = report_lost_process(self, exc) if isinstance(exc, WorkerLostError) else None
        if lost is None:
            return super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)
        # Reported: not a WorkerLostError to Celery any more, which would give the message back to
        # the queue and log its traceback. Acknowledged; the task ends FAILURE.
        try:
            raise PoolProcessLost(lost) from None
        except PoolProcessLost:
            reported = ExceptionInfo(internal=True)
        return super().on_failure(reported, send_failed_event=send_failed_event, return_ok=True)
