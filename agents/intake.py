"""What a manager does with the reports agents send (``workflows_app.wire``): the one place where
what an agent says enters the database.

:func:`take` stores a batch of reports in one transaction, in any order and any number of times:

* a **claim** is fencing: the attempt starts only if it is still its
  operation's current attempt, the operation waits for it (``sending``/``sent``) and its
  execution is ``started``; the answer says so, with what to run (the operation, its arguments,
  the input a canvas passes on, whether it is a dry run, how many retries it has left);
* a **started** report (a delivery ran the attempt unasked, on its message's grant) starts it as
  a claim would, at its agent's time; one of an attempt that may not run any more is logged and
  its process group stopped. An outcome or a loss that carries its start stores that first: the
  reports of one attempt may come in either order;
* an **outcome** is recorded by ``engine.reports`` (a report of an attempt that is no longer
  current is kept as a ``stale_report`` event and changes nothing);
* ``ctx.log`` lines, attempts that will never report (``lost``), processes gone after a kill,
  heartbeats and registrations of agent runs.

Every report is stored only with its proof under the key of the agent it names
(``workflows_app.wire.keys``), and a report about an attempt only when the attempt was sent to
that agent: an agent cannot speak for another agent, or for an execution it was sent nothing of.
A registration is taken only from a run of the agent that began after the one it has (an
incarnation begins with the time its run began): replaying an older run's registration cannot
make the current run's attempts lost. A report that is malformed, unproved or refused changes
nothing and is logged, alone: the others of its batch are stored. The answers to claims carry
the managers' proof for their agent.
"""

import logging
from collections import defaultdict
from datetime import datetime
from datetime import timezone as dt_timezone

from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from agents.models import Agent
from workflows_app import clock, signing, values, wire
from workflows_app.engine import grants, reports, steps, stopping
from workflows_app.errors import TransitionRefused, ValueRefused
from workflows_app.models import Event, Operation
from workflows_app.states import (
    EXECUTION_CLAIMABLE,
    OPERATION_ENDED_BY_REPORT,
    OPERATION_IN_FLIGHT,
    EventType,
    OperationState,
)
from workflows_app.transitions import claim_operation, operation_transition, record_event
from workflows_app.wire import keys

logger = logging.getLogger(__name__)


def take(bodies) -> list[tuple[str, dict]]:
    """Store the reports ``bodies`` (decoded JSON documents) in one transaction. Returns the
    answers to their claims, ``(reply queue, answer)``, to be sent once it committed."""
    parsed = []
    for body in bodies:
        try:
            parsed.append((wire.parse(body), body))
        except wire.Malformed as exc:
            logger.warning("report refused: %s", exc)
    answers = []
    with transaction.atomic():
        agent_keys = signing.agent_keys({report["agent"] for report, _ in parsed})
        parsed = [report for report, body in parsed if _proved(report, body, agent_keys[report["agent"]])]
        attempts = [r for r in parsed if r["kind"] in wire.ATTEMPT_KINDS]
        # Their rows in one prepared statement (steps.load), without their executions: the report
        # functions lock and read what they need of those.
        operations = {op.pk: op for op in steps.load({_pk(r) for r in attempts})} if attempts else {}
        # One order for every manager's batch (execution, then operation): two batches that lock
        # the same rows take them in the same order.
        attempts.sort(key=lambda r: (str(getattr(operations.get(_pk(r)), "execution_id", "")), r["operation"]))
        for report in attempts:
            operation = operations.get(_pk(report))
            if operation is None:
                logger.warning("%s report of agent %s for operation %s, which does not exist: ignored",
                               report["kind"], report["agent"], report["operation"])
                continue
            if operation.local:  # its pass runs it and records it: nothing on the wire speaks for it
                logger.warning("%s report of agent %s for operation %s, a local step: ignored",
                               report["kind"], report["agent"], report["operation"])
                continue
            if operation.agent != report["agent"]:  # its secret was made for the agent it names: not sent there
                logger.warning("%s report of agent %s for operation %s, which was sent to %s: ignored",
                               report["kind"], report["agent"], report["operation"], operation.agent)
                continue
            answer = HANDLERS[report["kind"]](report, operation)
            if report["kind"] == wire.Kind.CLAIM:
                answer = {"id": report["id"], **answer}
                answer["proof"] = keys.prove(agent_keys[report["agent"]], keys.Purpose.ANSWER, answer)
                answers.append((report["reply_to"], answer))
        gone = [r for r in parsed if r["kind"] == wire.Kind.GONE]
        if gone:
            _gone(gone)
        # An attempt cancelled before its start was known, whose end its execution's end awaits.
        ended = [(report["operation"], report["attempt"]) for report in attempts if report["kind"] in ENDS
                 and _held(operations.get(_pk(report)))]
        ended += [(pk, attempt) for report in gone for pk, attempt in report["attempts"]]
        if ended:
            transaction.on_commit(lambda: grants.release(ended))
        _agents(parsed)
    return answers


def _held(operation) -> bool:
    """Whether ``operation`` is cancelled with a grant still held for it (``engine.grants``)."""
    return operation is not None and operation.state == OperationState.CANCELLED and operation.granted_until is not None


def _pk(report):
    return Operation._meta.pk.to_python(report["operation"])


def _proved(report, body, key) -> bool:
    """Whether the agent the report names sent it (its proof under that agent's key) and, for a
    claim, wants the answer on a reply queue of its own."""
    if not keys.proven(body["proof"], key, keys.Purpose.REPORT, keys.without_proof(body)):
        logger.warning("%s report of agent %s refused: not proved with that agent's key", report["kind"], report["agent"])
        return False
    if report["kind"] == wire.Kind.CLAIM and not report["reply_to"].startswith(wire.reply_prefix(report["agent"])):
        logger.warning("claim of agent %s for attempt %s of operation %s refused: its answer would go to %r, "
                       "not a reply queue of that agent", report["agent"], report["attempt"], report["operation"],
                       report["reply_to"])
        return False
    return True


# --- claims ----------------------------------------------------------------------------------

def _claim(report, operation) -> dict:
    """Fencing: move the attempt to ``started`` if, and only if, it may start now."""
    attempt = report["attempt"]
    data = {"agent": report["agent"], "incarnation": report["incarnation"], "pid": report["pid"]}
    # The common case in one statement (PostgreSQL): the attempt is current, sent, its execution started.
    claimed = claim_operation(operation.pk, attempt, incarnation=report["incarnation"], data=data)
    if claimed is not None:
        return _run(claimed, claimed.dry_run)
    operation = Operation.objects.select_related("execution").get(pk=operation.pk)  # as it is now
    refused = _refusal(operation, attempt, report, data)
    if refused is not None:
        return refused
    return _run(operation, operation.execution.is_dry_run)


def _refusal(operation, attempt, report, data):
    """None when the attempt was moved to ``started`` here; else the answer that says why not."""
    if attempt != operation.attempt:
        return _drop(operation, attempt, f"attempt {operation.attempt} is current")
    if operation.execution.status not in EXECUTION_CLAIMABLE:
        return _drop(operation, attempt, f"the execution is {operation.execution.status}")
    if operation.state == OperationState.STARTED:
        # A second delivery of a started attempt: the agent that started it still runs it, or
        # (when it is the run asking) its pool process died with it, or the answer to its claim
        # was lost and it never ran. Only the agent can tell: the run that claimed it gets what
        # running it takes, as with "run".
        if report["incarnation"] == operation.incarnation:
            return {**_run(operation, operation.execution.is_dry_run), "verdict": wire.Verdict.STARTED,
                    "incarnation": operation.incarnation, "pid": _claimed_by(operation)}
        return {"verdict": wire.Verdict.STARTED, "incarnation": operation.incarnation}
    if operation.state == OperationState.SENDING:
        # The message overtook its sender's own sending -> sent write; the two race, and
        # whichever loses must not drop the attempt: either way it is now sent.
        try:
            operation_transition(operation, OperationState.SENT, attempt=attempt)
        except TransitionRefused:
            operation.refresh_from_db(fields=["state", "attempt", "incarnation"])
            if operation.attempt != attempt or operation.state != OperationState.SENT:
                return _drop(operation, attempt, f"it is {operation.state} (attempt {operation.attempt}) now")
    try:
        operation_transition(operation, OperationState.STARTED, attempt=attempt, incarnation=report["incarnation"], data=data)
    except TransitionRefused as refused:
        return _drop(operation, attempt, str(refused))
    return None


def _drop(operation, attempt, why) -> dict:
    """The answer that drops a delivery (its agent will never start the attempt: it notes it so)."""
    logger.info("operation %s attempt %s dropped: %s", operation.pk, attempt, why)
    if _held(operation) and attempt == operation.attempt:
        transaction.on_commit(lambda: grants.release([(str(operation.pk), attempt)]))
    record_event(operation.execution_id, EventType.LOG, f"delivery of attempt {attempt} dropped: {why}",
                 {"attempt": attempt, "fenced": True}, operation=operation.name)
    return {"verdict": wire.Verdict.DROP, "reason": why}


def _claimed_by(operation):
    """The pid of the process whose claim started the current attempt of ``operation`` (its
    ``task_started`` event keeps it), or None: of two deliveries in one run of an agent, only that
    process runs the attempt whose answer it may have lost."""
    data = (Event.objects.filter(execution_id=operation.execution_id, operation=operation.name,
                                 type=EventType.TASK_STARTED).order_by("-pk").values_list("data", flat=True).first())
    if isinstance(data, dict) and data.get("attempt") == operation.attempt and type(data.get("pid")) is int:
        return data["pid"]
    return None


def _run(operation, dry_run) -> dict:
    """The answer that starts the attempt: everything the agent needs to run it, and nothing else."""
    return {"verdict": wire.Verdict.RUN, **grants.grant(operation, dry_run)}


# --- what an attempt did --------------------------------------------------------------------

def _started(report, operation):
    """A delivery started the attempt unasked, on its message's grant: ``started``, as a claim
    would have made it. One that may not run any more (superseded, or cancelled before its agent
    heard the stop) is stopped: SIGTERM to its process group, SIGKILL after the grace."""
    if _start_unasked(report, operation, report["pid"], report["at"]):
        return
    if operation.attempt == report["attempt"] and operation.state in OPERATION_ENDED_BY_REPORT:
        return  # its outcome came first
    record_event(operation.execution_id, EventType.LOG,
                 f"attempt {report['attempt']} started on agent {report['agent']}, but it may not run: stopped",
                 {"attempt": report["attempt"], "fenced": True}, operation=operation.name)
    stopping.stop_attempts(operation.execution_id, [(operation.pk, report["attempt"])])


def _start_unasked(report, operation, pid, at) -> bool:
    """Move the attempt to ``started`` if it waits to start, at the time its agent says (``at``:
    seconds since the epoch; within the time it was sent and now); whether it is ``started`` now."""
    attempt = report["attempt"]
    if operation.attempt != attempt:
        return False
    if operation.state == OperationState.SENDING:
        try:
            operation_transition(operation, OperationState.SENT, attempt=attempt)
        except TransitionRefused:
            operation.refresh_from_db(fields=["state", "attempt"])
    if operation.state == OperationState.SENT:
        data = {"agent": report["agent"], "incarnation": report["incarnation"], "pid": pid, "unasked": True}
        try:
            now = clock.now()
            began = datetime.fromtimestamp(at, tz=dt_timezone.utc)
            began = max(operation.sent_at or now, min(began, now))  # the agent's clock, within the manager's
            operation_transition(operation, OperationState.STARTED, attempt=attempt, incarnation=report["incarnation"],
                                 data=data, started_at=began)
        except TransitionRefused:
            operation.refresh_from_db(fields=["state", "attempt"])
    return operation.attempt == attempt and operation.state == OperationState.STARTED


def _outcome(report, operation):
    if report["started"] is not None:  # it ran unasked, and ended before its start was reported
        _start_unasked(report, operation, report["started"], report["started_at"])
    reports.record_outcome(operation, report["attempt"], report)


def _log(report, operation):
    try:
        reports.record_log(operation.execution_id, operation.name, report["message"], report["data"])
    except ValueRefused as refused:  # the agent checks it too: only a forged or odd report gets here
        logger.warning("log of %s refused: %s", operation.name, refused)


def _lost(report, operation):
    """An attempt that will never report: its pool process died, its message was revoked, its
    agent handed it back when it shut down. Lost, a retryable failure, if it is still current
    and not over; a message that overtook its sender's write of ``sent`` is sent first."""
    attempt = report["attempt"]
    if report["started"] is not None:  # it ran unasked: its start comes with its loss
        _start_unasked(report, operation, report["started"], report["started_at"])
    if operation.attempt != attempt or operation.state not in OPERATION_IN_FLIGHT:
        return
    if operation.state == OperationState.SENDING:
        try:
            operation_transition(operation, OperationState.SENT, attempt=attempt)
        except TransitionRefused:
            return
    reports.record_lost(operation, attempt, values.clean_text(report["message"]))


HANDLERS = {wire.Kind.CLAIM: _claim, wire.Kind.STARTED: _started, wire.Kind.OUTCOME: _outcome, wire.Kind.LOG: _log,
            wire.Kind.LOST: _lost}
#: The reports that say an attempt ended, or will never run: a grant held for it is over.
ENDS = frozenset({wire.Kind.OUTCOME, wire.Kind.LOST})


def _gone(gone_reports):
    """The processes of these attempts are gone (after a kill): each one sent to the agent that
    says so is recorded."""
    attempts = [(pk, attempt, report["agent"]) for report in gone_reports for pk, attempt in report["attempts"]]
    sent_to = {str(pk): agent for pk, agent in Operation.objects.filter(pk__in={pk for pk, _, _ in attempts})
               .values_list("pk", "agent")}
    mine = [(pk, attempt) for pk, attempt, agent in attempts if sent_to.get(pk) == agent]
    if len(mine) < len(attempts):
        logger.warning("%d attempt(s) of reports that processes are gone refused: not sent to the agents that "
                       "reported them", len(attempts) - len(mine))
    if mine:
        reports.record_processes_gone(mine)


# --- the agents' runs -------------------------------------------------------------------------

def _agents(agent_reports):
    """Registrations (a run of an agent begins), then what says that a run is alive, once for
    each agent: its heartbeats and every other report of its current run. A claim is one: a run
    that claims the attempts waiting for it as soon as its worker is ready, before its first
    heartbeat, is not taken for offline (and its new attempts for lost) in the same moment. Only
    a heartbeat makes the row of an agent that has none: the managers' operations report under
    the management queue's name, which is no agent and never heart-beats. A heartbeat says where
    its run is, as its registration did (which may have found no reports queue): a stop is sent
    to ``<agent>@<host>``."""
    registered = {}
    beating = defaultdict(set)
    heartbeats = {}
    for report in agent_reports:
        if report["kind"] == wire.Kind.REGISTER:
            registered[report["agent"]] = report
        else:
            beating[report["agent"]].add(report["incarnation"])
            if report["kind"] == wire.Kind.HEARTBEAT:
                heartbeats[report["agent"]] = report
    for report in registered.values():
        current = Agent.objects.filter(name=report["agent"]).values_list("incarnation", flat=True).first()
        if current and report["incarnation"] != current and not began_after(report["incarnation"], current):
            logger.warning("registration of agent %s refused: its run %s did not begin after the current one, %s",
                           report["agent"], report["incarnation"], current)
            continue
        register(report["agent"], report["incarnation"], hostname=report["hostname"], pid=report["pid"],
                 concurrency=report["concurrency"])
    now = timezone.now()
    for name, incarnations in beating.items():
        beat = heartbeats.get(name)
        host = {}
        if beat is not None and beat["hostname"]:  # the host of the run that sent it, of the row that is that run
            host = {"hostname": Case(When(incarnation=beat["incarnation"], then=Value(beat["hostname"])),
                                     default=F("hostname"))}
        if Agent.objects.filter(name=name, incarnation__in=incarnations).update(last_heartbeat=now, **host) or beat is None:
            continue
        # An agent with no row: its registration found no manager's queue to go to (the very
        # first start of a deployment). Its heartbeat registers it.
        _, created = Agent.objects.get_or_create(name=name, defaults={"incarnation": beat["incarnation"],
                                                                       "hostname": beat["hostname"],
                                                                       "started_at": now, "last_heartbeat": now})
        if not created:
            logger.info("heartbeat of agent %s (run %s), which is not its current run: ignored", name, sorted(incarnations))


def began_after(incarnation, current) -> bool:
    """Whether the run ``incarnation`` began after the run ``current`` (an incarnation begins with
    the hexadecimal nanoseconds at which its run began and a dot, :func:`agents.worker.lifecycle.begin`);
    True when ``current`` does not tell (a run of an earlier version)."""
    began, now = _began(incarnation), _began(current)
    return now is None or (began is not None and began > now)


def _began(incarnation):
    head, dot, _ = incarnation.partition(".")
    if not dot or len(head) != 16:
        return None
    try:
        return int(head, 16)
    except ValueError:
        return None


def register(name, incarnation, *, hostname, pid, concurrency):
    """A run of agent ``name`` begins: its row says so, and whatever an earlier run of it left
    ``started`` was lost with that run (a retryable failure)."""
    now = timezone.now()
    Agent.objects.update_or_create(name=name, defaults={
        "incarnation": incarnation, "hostname": hostname, "pid": pid,
        "concurrency": concurrency, "started_at": now, "last_heartbeat": now})
    lost = Operation.objects.filter(agent=name, state=OperationState.STARTED).exclude(incarnation=incarnation)
    for operation in lost:
        reports.record_lost(operation, operation.attempt, f"lost: agent {name} started again")
