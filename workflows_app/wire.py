"""What agents and managers say to each other through the broker, besides the operation messages.

An agent holds broker credentials only. Everything it tells the system is a **report**, a JSON
document it publishes to the managers' reports queue (:func:`reports_queue`); a manager stores
reports in batches (``agents.intake``). One report asks for an answer: the **claim** of an
attempt, which a manager answers on the reply queue the claim names (:func:`reply_queue`).

Anyone who may publish to the broker may publish a report, so a manager reads each one with
:func:`parse`, which checks every field's type and refuses the rest (:class:`Malformed`); what
the report is *about* is then proved by the attempt's secret (``workflows_app.signing``).

=============  =================================================================================
kind           fields besides ``kind``, ``agent`` and ``incarnation``
=============  =================================================================================
``claim``      ``operation``, ``attempt``, ``secret``, ``pid``, ``reply_to``, ``id``: may this
               delivery start the attempt? Answered with a ``verdict`` (:class:`Verdict`).
``outcome``    ``operation``, ``attempt``, ``secret``, ``outcome`` (:class:`Outcome`), ``result``,
               ``error``, ``retryable``, ``retry_after``
``log``        ``operation``, ``attempt``, ``secret``, ``message``, ``data``: ``ctx.log``
``lost``       ``operation``, ``attempt``, ``secret``, ``message``: the attempt will never report
``gone``       ``attempts`` (``[operation, attempt, secret]`` each): their processes are gone
``heartbeat``  nothing more
``register``   ``hostname``, ``pid``, ``concurrency``: a run of the agent begins
=============  =================================================================================
"""

import enum
import math
import uuid

from workflows_app.conf import workflows_settings


class Kind(enum.StrEnum):
    CLAIM = "claim"
    OUTCOME = "outcome"
    LOG = "log"
    LOST = "lost"
    GONE = "gone"
    HEARTBEAT = "heartbeat"
    REGISTER = "register"


class Outcome(enum.StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"  # it raised OperationCancelled: its execution is cancelling


class Verdict(enum.StrEnum):
    """A manager's answer to a claim."""

    RUN = "run"  # the attempt is started: run it (the answer carries what to run)
    DROP = "drop"  # it may not start (superseded, cancelled, not current...): drop the delivery
    STARTED = "started"  # it was started already, by the run of the agent ``incarnation`` names


#: The kinds whose report is about one attempt of an operation, and carries its secret.
ATTEMPT_KINDS = frozenset({Kind.CLAIM, Kind.OUTCOME, Kind.LOG, Kind.LOST})
#: Longest agent name, incarnation, host name and reply queue name taken (the columns' sizes).
MAX_NAME = 200


class Malformed(ValueError):
    """A report that is not one: a missing field, a field of the wrong type, an unknown kind."""


def reports_queue() -> str:
    """The queue every manager takes reports from: the management queue's, so that managers of
    different management queues (a test's, another deployment's) never take each other's."""
    return f"{workflows_settings.MANAGEMENT_QUEUE}.reports"


def reports_exchange() -> str:
    """The exchange agents publish their reports to on RabbitMQ (bound to :func:`reports_queue` by
    the managers). Not the queue's name: an agent's own account may publish to this exchange and
    never read the queue, which holds other agents' reports."""
    return f"{workflows_settings.MANAGEMENT_QUEUE}.reporting"


def reply_queue(agent, hostname, pid) -> str:
    """The queue a worker process of ``agent`` takes the answers to its claims from. It starts
    with the agent's name, so that a broker account of the agent's own may read it."""
    return f"{agent}.replies.{hostname}.{pid}"


def reply_prefix(agent) -> str:
    """What the reply queue of every process of ``agent`` starts with."""
    return f"{agent}.replies."


def parse(body) -> dict:
    """The report ``body`` as a dict of checked fields; :class:`Malformed` when it is not one."""
    if not isinstance(body, dict):
        raise Malformed("a report is a JSON object")
    try:
        kind = Kind(body.get("kind"))
    except ValueError:
        raise Malformed(f"unknown kind {str(body.get('kind'))[:40]!r}") from None
    report = {"kind": kind, "agent": _name(body, "agent"), "incarnation": _text(body, "incarnation", 64)}
    if kind in ATTEMPT_KINDS:
        report.update(operation=_uuid(body, "operation"), attempt=_attempt(body.get("attempt")), secret=_text(body, "secret", 128))
    if kind == Kind.CLAIM:
        report.update(pid=_int(body, "pid"), reply_to=_name(body, "reply_to"), id=_text(body, "id", 64))
    elif kind == Kind.OUTCOME:
        try:
            outcome = Outcome(body.get("outcome"))
        except ValueError:
            raise Malformed("outcome: not one of succeeded, failed, cancelled") from None
        error = body.get("error")
        if outcome != Outcome.SUCCEEDED and not (
                isinstance(error, dict) and all(isinstance(error.get(key, ""), str) for key in ("type", "message", "traceback"))):
            raise Malformed("error: an object whose type, message and traceback are strings is needed")
        retry_after = body.get("retry_after")
        if retry_after is not None and not _number(retry_after):
            raise Malformed("retry_after: a number of seconds or null")
        report.update(outcome=outcome, result=body.get("result"), error=error,
                      retryable=body.get("retryable") is True, retry_after=retry_after)
    elif kind == Kind.LOG:
        if not isinstance(body.get("data"), dict):
            raise Malformed("data: an object is needed")
        report.update(message=_text(body, "message", None), data=body["data"])
    elif kind == Kind.LOST:
        report.update(message=_text(body, "message", 1000))
    elif kind == Kind.GONE:
        attempts = body.get("attempts")
        if not isinstance(attempts, list) or not all(isinstance(a, list) and len(a) == 3 for a in attempts):
            raise Malformed("attempts: a list of [operation, attempt, secret]")
        report.update(attempts=[(_uuid({"operation": o}, "operation"), _attempt(a), _text({"secret": s}, "secret", 128))
                                for o, a, s in attempts])
    elif kind == Kind.REGISTER:
        concurrency = body.get("concurrency")
        if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
            raise Malformed("concurrency: a positive integer or null")
        report.update(hostname=_text(body, "hostname", 255), pid=_int(body, "pid"), concurrency=concurrency)
    return report


def _text(body, name, limit):
    value = body.get(name)
    if not isinstance(value, str) or (limit is not None and len(value) > limit):
        raise Malformed(f"{name}: a string{'' if limit is None else f' of at most {limit} characters'} is needed")
    return value


def _name(body, name):
    value = _text(body, name, MAX_NAME)
    if not value:
        raise Malformed(f"{name}: may not be empty")
    return value


def _uuid(body, name):
    value = body.get(name)
    if isinstance(value, str) and len(value) <= 64:
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise Malformed(f"{name}: a UUID is needed")


def _attempt(value):
    if type(value) is not int or not 0 < value < 2**31:
        raise Malformed("attempt: a positive integer is needed")
    return value


def _int(body, name):
    value = body.get(name)
    if type(value) is not int or not 0 <= value < 2**31:
        raise Malformed(f"{name}: a non-negative integer is needed")
    return value


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
