"""What agents and managers say to each other through the broker, besides the operation messages.

An agent holds broker credentials and its key only. Everything it tells the system is a
**report**, a JSON document it publishes to the managers' reports queue (:func:`reports_queue`);
a manager stores reports in batches (``agents.intake``). One report asks for an answer: the
**claim** of an attempt, which a manager answers on the reply queue the claim names
(:func:`reply_queue`).

Anyone who may publish to the broker may publish a report, so a manager reads each one with
:func:`parse`, which checks every field's type and size and refuses the rest (:class:`Malformed`);
that the agent it names sent it is then proved by its ``proof``, an HMAC of the whole report
under that agent's key (``workflows_app.wire.keys``). A report is at most :func:`max_report_bytes`
long, refused unread beyond.

=============  =================================================================================
kind           fields besides ``kind``, ``agent``, ``incarnation`` and ``proof``
=============  =================================================================================
``claim``      ``operation``, ``attempt``, ``pid``, ``reply_to``, ``id``: may this delivery start
               the attempt? Answered with a ``verdict`` (:class:`Verdict`), proved for the agent.
``started``    ``operation``, ``attempt``, ``pid``, ``at`` (its time): a delivery started the attempt
               unasked (its message's grant allowed it: ``agents.worker.grants``)
``outcome``    ``operation``, ``attempt``, ``outcome`` (:class:`Outcome`), ``result``, ``error``,
               ``retryable``, ``retry_after``, and ``started`` (the pid) and ``started_at`` when it
               ran unasked and ended before its ``started`` report left
``log``        ``operation``, ``attempt``, ``message``, ``data``: ``ctx.log``
``lost``       ``operation``, ``attempt``, ``message`` (and ``started``, ``started_at`` as an
               outcome's): the attempt will never report
``gone``       ``attempts`` (``[operation, attempt]`` each): their processes are gone
``heartbeat``  nothing more
``register``   ``hostname``, ``pid``, ``concurrency``: a run of the agent begins
=============  =================================================================================
"""

import enum
import math
import uuid

from workflows_app import values
from workflows_app.conf import workflows_settings
from workflows_app.errors import ValueRefused
from workflows_app.wire import keys


class Kind(enum.StrEnum):
    CLAIM = "claim"
    STARTED = "started"
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


#: The kinds whose report is about one attempt of an operation.
ATTEMPT_KINDS = frozenset({Kind.CLAIM, Kind.STARTED, Kind.OUTCOME, Kind.LOG, Kind.LOST})
#: Longest agent name, incarnation, host name and reply queue name taken (the columns' sizes).
MAX_NAME = 200


#: The fields each kind may carry besides ``kind``, ``agent``, ``incarnation`` and ``proof``.
FIELDS = {
    Kind.CLAIM: {"operation", "attempt", "pid", "reply_to", "id"},
    Kind.STARTED: {"operation", "attempt", "pid", "at"},
    Kind.OUTCOME: {"operation", "attempt", "outcome", "result", "error", "retryable", "retry_after", "started",
                   "started_at"},
    Kind.LOG: {"operation", "attempt", "message", "data"},
    Kind.LOST: {"operation", "attempt", "message", "started", "started_at"},
    Kind.GONE: {"attempts"},
    Kind.HEARTBEAT: {"hostname"},
    Kind.REGISTER: {"hostname", "pid", "concurrency"},
}
#: The longest ``lost`` message and error type taken (their columns' and events' sizes).
MAX_LINE = 1000
#: What a report may add to its payload (a result, an error, a log's data): its other fields and
#: the JSON around them.
REPORT_OVERHEAD_BYTES = 64 * 1024


class Malformed(ValueError):
    """A report that is not one: a missing field, a field of the wrong type or size, an unknown kind."""


def max_report_bytes() -> int:
    """The longest report a manager reads: a payload of ``MAX_PAYLOAD_BYTES`` (a result, an error,
    a log's data) with every character escaped twice over, and the rest. Longer: refused unread."""
    return 2 * workflows_settings.MAX_PAYLOAD_BYTES + REPORT_OVERHEAD_BYTES


def reports_queue() -> str:
    """The queue every manager takes reports from: the management queue's, so that managers of
    different management queues (a test's, another deployment's) never take each other's."""
    return f"{workflows_settings.MANAGEMENT_QUEUE}.reports"


def reports_exchange() -> str:
    """The exchange agents publish their reports to on RabbitMQ (bound to :func:`reports_queue` by
    the managers). Not the queue's name: an agent's own account may publish to this exchange and
    never read the queue, which holds other agents' reports."""
    return f"{workflows_settings.MANAGEMENT_QUEUE}.reporting"


#: How long a delivery waits for a manager to answer its claim, beyond the managers' own
#: DATABASE_OUTAGE_TOLERANCE (a manager waits that long for its database before it gives up).
CLAIM_MARGIN_SECONDS = 10.0


#: How far the clocks of a manager and an agent may be apart: a grant is taken as expired this
#: long before its deadline, and as older than the agent's broker connection up to this long after.
CLOCK_SKEW_SECONDS = 1.0


def claim_seconds() -> float:
    """How long a claim waits for its answer before its message goes back to the queue."""
    return float(workflows_settings.DATABASE_OUTAGE_TOLERANCE) + CLAIM_MARGIN_SECONDS


def reply_queue(agent, hostname, pid) -> str:
    """The queue a worker process of ``agent`` takes the answers to its claims from. It starts
    with the agent's name, so that a broker account of the agent's own may read it."""
    return f"{agent}.replies.{hostname}.{pid}"


def reply_prefix(agent) -> str:
    """What the reply queue of every process of ``agent`` starts with."""
    return f"{agent}.replies."


def parse(body) -> dict:
    """The report ``body`` as a dict of checked fields; :class:`Malformed` when it is not one. Its
    proof is checked for form only: whether it proves anything is the intake's to say."""
    if not isinstance(body, dict):
        raise Malformed("a report is a JSON object")
    try:
        kind = Kind(body.get("kind"))
    except ValueError:
        raise Malformed(f"unknown kind {str(body.get('kind'))[:40]!r}") from None
    extra = set(body) - FIELDS[kind] - {"kind", "agent", "incarnation", "proof"}
    if extra:
        raise Malformed(f"{kind}: no field {sorted(extra)[0][:40]!r}")
    if not keys.is_key(body.get("proof")):
        raise Malformed(f"proof: {keys.KEY_CHARS} hexadecimal digits are needed")
    report = {"kind": kind, "agent": _name(body, "agent"), "incarnation": _text(body, "incarnation", 64)}
    if kind in ATTEMPT_KINDS:
        report.update(operation=_uuid(body, "operation"), attempt=_attempt(body.get("attempt")))
    if kind == Kind.CLAIM:
        report.update(pid=_int(body, "pid"), reply_to=_name(body, "reply_to"), id=_text(body, "id", 64))
    elif kind == Kind.STARTED:
        report.update(pid=_int(body, "pid"), at=_moment(body, "at"))
    elif kind == Kind.OUTCOME:
        try:
            outcome = Outcome(body.get("outcome"))
        except ValueError:
            raise Malformed("outcome: not one of succeeded, failed, cancelled") from None
        error = body.get("error")
        if outcome != Outcome.SUCCEEDED and not (
                isinstance(error, dict) and all(isinstance(error.get(key, ""), str) for key in ("type", "message", "traceback"))):
            raise Malformed("error: an object whose type, message and traceback are strings is needed")
        if error is not None:
            _payload(error, "error")
        retry_after = body.get("retry_after")
        if retry_after is not None and not _number(retry_after):
            raise Malformed("retry_after: a number of seconds or null")
        report.update(outcome=outcome, result=body.get("result"), error=error,
                      retryable=body.get("retryable") is True, retry_after=retry_after, **_started(body))
    elif kind == Kind.LOG:
        if not isinstance(body.get("data"), dict):
            raise Malformed("data: an object is needed")
        report.update(message=_text(body, "message", workflows_settings.MAX_PAYLOAD_BYTES), data=body["data"])
    elif kind == Kind.LOST:
        report.update(message=_text(body, "message", MAX_LINE), **_started(body))
    elif kind == Kind.GONE:
        attempts = body.get("attempts")
        if not isinstance(attempts, list) or not all(isinstance(a, list) and len(a) == 2 for a in attempts):
            raise Malformed("attempts: a list of [operation, attempt]")
        report.update(attempts=[(_uuid({"operation": o}, "operation"), _attempt(a)) for o, a in attempts])
    elif kind == Kind.HEARTBEAT:
        # Where the run is, again: its registration may have found no reports queue (a deployment's
        # very first start), and a stop needs it. Optional: a heartbeat of an earlier version has none.
        report.update(hostname=_text(body, "hostname", 255) if "hostname" in body else "")
    elif kind == Kind.REGISTER:
        concurrency = body.get("concurrency")
        if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
            raise Malformed("concurrency: a positive integer or null")
        report.update(hostname=_text(body, "hostname", 255), pid=_int(body, "pid"), concurrency=concurrency)
    return report


def _payload(value, name):
    try:
        values.check(value, name)
    except ValueRefused as refused:
        raise Malformed(str(refused)) from None


def _text(body, name, limit):
    value = body.get(name)
    if not isinstance(value, str) or (limit is not None and len(value) > limit):
        raise Malformed(f"{name}: a string{'' if limit is None else f' of at most {limit} characters'} is needed")
    problem = values.string_problem(value)  # what the database cannot store would fail the whole batch
    if problem is not None:
        raise Malformed(f"{name}: {problem}")
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


def _started(body) -> dict:
    """An outcome's or a loss's ``started`` (pid) and ``started_at``: the attempt ran unasked and
    its start travels with its end (None, None when it does not)."""
    if "started" not in body:
        return {"started": None, "started_at": None}
    return {"started": _int(body, "started"), "started_at": _moment(body, "started_at")}


#: The latest time a report may name (the end of year 9999, the last a datetime holds).
LATEST_MOMENT = 253402300799.0


def _moment(body, name) -> float:
    value = body.get(name)
    if not _number(value) or value > LATEST_MOMENT:
        raise Malformed(f"{name}: a time (seconds since the epoch) is needed")
    return float(value)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
