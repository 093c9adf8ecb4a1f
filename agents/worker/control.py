"""The Celery remote-control commands every agent and manager registers: the kill, the cancel,
what runs here, and the outcomes to send again.

``switchyard_kill`` is broadcast (``workflows_app.broker.broadcast_kill``) with the attempts
of an execution's running operations and, optionally, its dispatcher. Each worker looks them up
among the process groups it recorded as running on this host (``agents.worker.local``), sends SIGTERM
to each whole group — the pool process and every subprocess the operation started — and SIGKILL
to what is left after the grace period. A worker that runs none of them does nothing, and an
agent that misses the broadcast (offline, restarting) can never start those attempts later:
fencing refuses them, as the operations are already ``cancelled``.

The handler runs in the worker's main process, never in a pool process, so it can signal a pool
process that is busy; Celery replaces a pool process that died.

Anyone who may publish to the broker may broadcast these commands, so what arrives is checked
before it is used. Each attempt a command names comes as ``[operation id, attempt, agent, proof]``:
the proof, under the key of the agent it names, that a manager asks this of that attempt
(``workflows_app.wire.keys``). A worker acts on the attempts proved for itself, passes over those
of other agents, and ignores (and logs) one of its own with no valid proof: a forged kill stops
nothing. A dispatcher's kill carries the proof for the managers' name. The grace is a number of
seconds up to a day, or this worker's own. Even a proved key is only compared with the names of
the records this worker wrote (``local.recorded_groups``): it never becomes a path, and only a
process group a record holds is ever signalled. What this worker runs is answered with a proof
of its own, for the question's nonce.
"""

import logging
import os
import reprlib
import signal
import threading
import time
import uuid

from celery.worker.control import control_command

from agents.worker import journal, link, local
from workflows_app import wire
from workflows_app.conf import workflows_settings
from workflows_app.wire import keys
from workflows_app.broker import CANCEL_COMMAND, KILL_COMMAND, RESEND_COMMAND, RUNNING_COMMAND, STOP_COMMAND

logger = logging.getLogger(__name__)

#: The highest attempt an operation can have (its column is a PositiveIntegerField).
MAX_ATTEMPT = 2**31 - 1
#: The longest grace a kill may ask for: a day.
MAX_GRACE_SECONDS = 86400.0


@control_command(
    name=KILL_COMMAND,
    args=[("execution_id", str), ("attempts", list), ("dispatcher", str), ("grace", float)],
    signature="<execution_id> [attempts] [dispatcher proof] [grace]",
)
def switchyard_kill(state, execution_id=None, attempts=None, dispatcher=None, grace=None, **kwargs):
    """SIGTERM the process groups of an execution's attempts (and dispatcher), SIGKILL after grace."""
    found = attempt_keys(attempts, keys.Purpose.KILL)
    if dispatcher:
        execution = canonical_uuid(execution_id)
        if execution is None or not keys.proven(dispatcher, link.own_key(), keys.Purpose.KILL_DISPATCHER, execution_id):
            logger.warning("kill: ignored the dispatcher of execution %s: not a manager's request",
                           reprlib.repr(execution_id))
        else:
            found.add(local.dispatcher_key(execution))
    signalled = terminate(found, grace_seconds(grace))
    return {"ok": {"signalled": signalled, "agent": local.name()}}


def attempt_keys(attempts, purpose) -> set[str]:
    """The record keys (``local.attempt_key``) of the attempts of ``attempts`` proved for this
    agent and ``purpose``: ``[operation id (a UUID), attempt (an int from 1 to MAX_ATTEMPT), agent,
    proof]``. Those of other agents are passed over; the others are ignored, and logged once."""
    if attempts is None:
        return set()
    if not isinstance(attempts, (list, tuple)):
        logger.warning("%s: ignored attempts that are not a list: %s", purpose, reprlib.repr(attempts))
        return set()
    found, ignored = set(), []
    for entry in attempts:
        if isinstance(entry, (list, tuple)) and len(entry) == 4 and entry[2] != local.name() and isinstance(entry[2], str):
            continue  # another agent's
        key = _attempt_key(entry, purpose)
        if key is None:
            ignored.append(entry)
        else:
            found.add(key)
    if ignored:
        logger.warning("%s: ignored %d attempt(s) of %d, malformed or not proved by a manager: %s", purpose,
                       len(ignored), len(attempts), reprlib.repr(ignored))
    return found


def _attempt_key(entry, purpose):
    if not isinstance(entry, (list, tuple)) or len(entry) != 4:
        return None
    operation_id, attempt = canonical_uuid(entry[0]), entry[1]
    if operation_id is None or type(attempt) is not int or not 0 < attempt <= MAX_ATTEMPT:
        return None
    if not keys.proven(entry[3], link.own_key(), purpose, [entry[0], attempt]):
        return None
    return local.attempt_key(operation_id, attempt)


def canonical_uuid(value):
    """``value`` as a UUID's canonical text (hex digits and dashes only), or None if it is not one."""
    if not isinstance(value, str) or len(value) > 64:  # longer than any spelling of a UUID
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def grace_seconds(grace) -> float:
    """The grace a kill asked for, from 0 to MAX_GRACE_SECONDS; else (none, NaN, infinite,
    negative, not a number) this worker's own KILL_GRACE_SECONDS."""
    # NaN compares false with everything, infinity is above the bound: both are refused here.
    if isinstance(grace, (int, float)) and not isinstance(grace, bool) and 0 <= grace <= MAX_GRACE_SECONDS:
        return float(grace)
    if grace is not None:
        logger.warning("kill: ignored the grace %s: KILL_GRACE_SECONDS instead", reprlib.repr(grace))
    return float(workflows_settings.KILL_GRACE_SECONDS)


@control_command(name=CANCEL_COMMAND, args=[("attempts", list)], signature="[attempts]")
def switchyard_cancel(state, attempts=None, **kwargs):
    """Ask the attempts this worker runs among ``attempts`` to stop: ``ctx.is_cancelled()`` is
    true in them from now on (the operation decides what to do about it)."""
    asked = local.request_cancel(attempt_keys(attempts, keys.Purpose.CANCEL))
    return {"ok": {"asked": asked, "agent": local.name()}}


@control_command(name=RUNNING_COMMAND, args=[("nonce", str)], signature="<nonce>")
def switchyard_running(state, nonce="", **kwargs):
    """What this worker runs now: its agent name, this run's incarnation and the operation
    attempts its pool processes run (keys ``<operation id>.<attempt>``), proved for the question's
    ``nonce``. A manager that starts asks every worker, to tell the operations still running from
    those lost."""
    answer = {"agent": local.name(), "incarnation": local.incarnation(), "running": local.running_attempts()}
    proof = keys.prove(link.own_key(), keys.Purpose.RUNNING, {**answer, "nonce": str(nonce)[:64]})
    return {"ok": {**answer, "proof": proof}}


@control_command(name=STOP_COMMAND, args=[("attempts", list), ("nonce", str)], signature="[attempts] <nonce>")
def switchyard_stop(state, attempts=None, nonce="", **kwargs):
    """Put ``attempts`` (sent to this agent, and cancelled or superseded since) on this agent's
    stop list, its journal: no delivery of one starts it from now on. Answers for each, proved
    for the question's ``nonce``: ``refused`` (it never started here and never will), ``running``
    (a delivery started it: it is stopped as the engine says) or ``ended`` (it ran here)."""
    answers = {key: journal.stop(key) for key in sorted(attempt_keys(attempts, keys.Purpose.STOP))}
    answer = {"agent": local.name(), "answers": answers}
    proof = keys.prove(link.own_key(), keys.Purpose.STOPPED, {**answer, "nonce": str(nonce)[:64]})
    return {"ok": {**answer, "proof": proof}}


#: An outcome is sent again only when its attempt ended here at least this long ago: one that
#: ended since is most likely still waiting in the reports queue to be stored.
RESEND_AFTER_SECONDS = 30.0


@control_command(name=RESEND_COMMAND, args=[("attempts", list)], signature="[attempts]")
def switchyard_resend_outcomes(state, attempts=None, **kwargs):
    """Send again the outcome report of each of ``attempts`` that ended on this worker more than
    RESEND_AFTER_SECONDS ago (``local.kept_outcome``). The managers' database still has them
    started: the report the broker took was lost on its way to a manager (Redis hands a message
    to one consumer, and a manager killed at that moment takes it with it). Storing an outcome
    twice changes nothing."""
    resent = []
    for key in sorted(attempt_keys(attempts, keys.Purpose.RESEND)):
        report = local.kept_outcome(key, ended_before=RESEND_AFTER_SECONDS)
        if report is None:
            continue
        try:
            link.report(wire.Kind.OUTCOME, **{name: value for name, value in report.items() if name != "secret"})
        except link.Unreachable as exc:
            logger.warning("could not send again the outcome of %s: %s", key, exc)
            break
        resent.append(key)
    if resent:
        logger.warning("sent again the outcome of %d attempt(s) the managers still have started: %s", len(resent), resent)
    return {"ok": {"resent": resent, "agent": local.name()}}


def terminate(keys, grace) -> list[str]:
    """SIGTERM each recorded process group of ``keys`` now; SIGKILL it after ``grace`` seconds if
    it is still recorded as running that key. Once the groups are gone, the attempts among them
    are reported stopped (a ``gone`` report to the managers): the engine waits for that before
    it shows workflow code a failure whose failure mode cancelled running steps. Returns the
    keys that were signalled. Only the groups this worker recorded are: ``keys`` are looked up
    among its records (``local.recorded_groups``), never read as paths."""
    targets = []
    for key, pgid in local.recorded_groups(keys).items():
        if pgid == os.getpgrp() or not local.group_alive(pgid):
            continue
        local.signal_group(pgid, signal.SIGTERM)
        targets.append((key, pgid))
    if targets:
        logger.warning("kill: SIGTERM to %s; SIGKILL in %ss to what is left", [k for k, _ in targets], grace)
        threading.Thread(target=_watch, args=(targets, grace), name="switchyard-kill", daemon=True).start()
    return [key for key, _ in targets]


#: How often the kill looks whether a signalled group is gone, and how long after SIGKILL.
WATCH_SECONDS = 0.05
AFTER_SIGKILL_SECONDS = 2.0


def _watch(targets, grace):
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(local.group_running(pgid) for _, pgid in targets):
        time.sleep(WATCH_SECONDS)
    for key, pgid in targets:
        # The record outlives a leader that died of the SIGTERM (it never reached mark_done), so
        # the group's stragglers are found here. A record that is gone means the attempt ended by
        # itself and its pool process may run something else now: it is left alone.
        if local.process_group_of(key) == pgid:
            local.signal_group(pgid, signal.SIGKILL)
            local.mark_done(key)
    deadline = time.monotonic() + AFTER_SIGKILL_SECONDS
    while time.monotonic() < deadline and any(local.group_running(pgid) for _, pgid in targets):
        time.sleep(WATCH_SECONDS)
    gone = [list(attempt) for attempt in
            (local.parse_attempt_key(key) for key, pgid in targets if not local.group_running(pgid))
            if attempt is not None]
    if gone:
        try:
            link.report(wire.Kind.GONE, attempts=gone)
        except Exception:  # the engine waits at most the grace for it: a lost report only slows it
            logger.exception("kill: could not report the stopped attempts %s", gone)
