"""The kill: a Celery remote-control command every agent and manager registers.

``switchyard_kill`` is broadcast (``workflows_app.dispatch.broadcast_kill``) with the attempts
of an execution's running operations and, optionally, its dispatcher. Each worker looks them up
among the process groups it recorded as running on this host (``agents.worker.local``), sends SIGTERM
to each whole group — the pool process and every subprocess the operation started — and SIGKILL
to what is left after the grace period. A worker that runs none of them does nothing, and an
agent that misses the broadcast (offline, restarting) can never start those attempts later:
fencing refuses them, as the operations are already ``cancelled`` (SPEC §5, §7).

The handler runs in the worker's main process, never in a pool process, so it can signal a pool
process that is busy; Celery replaces a pool process that died.
"""

import logging
import os
import signal
import threading
import time

from celery.worker.control import control_command
from django.db import connections

from agents.worker import local
from agents.worker.forks import no_fork_meanwhile
from workflows_app.dispatch import KILL_COMMAND, RUNNING_COMMAND
from workflows_app.engine import reports

logger = logging.getLogger(__name__)


@control_command(
    name=KILL_COMMAND,
    args=[("execution_id", str), ("attempts", list), ("dispatcher", bool), ("grace", float)],
    signature="<execution_id> [attempts] [dispatcher] [grace]",
)
def switchyard_kill(state, execution_id=None, attempts=None, dispatcher=False, grace=5.0, **kwargs):
    """SIGTERM the process groups of an execution's attempts (and dispatcher), SIGKILL after grace."""
    keys = [local.attempt_key(operation_id, attempt) for operation_id, attempt in attempts or ()]
    if dispatcher and execution_id:
        keys.append(local.dispatcher_key(execution_id))
    signalled = terminate(keys, float(grace))
    return {"ok": {"signalled": signalled, "agent": local.name()}}


@control_command(name=RUNNING_COMMAND)
def switchyard_running(state, **kwargs):
    """What this worker runs now: its agent name, this run's incarnation and the operation
    attempts its pool processes run (keys ``<operation id>.<attempt>``). A manager that starts
    asks every worker, to tell the operations still running from those lost (SPEC §9)."""
    return {"ok": {"agent": local.name(), "incarnation": local.incarnation(), "running": local.running_attempts()}}


def terminate(keys, grace) -> list[str]:
    """SIGTERM each recorded process group of ``keys`` now; SIGKILL it after ``grace`` seconds if
    it is still recorded as running that key. Once the groups are gone, the attempts among them
    are reported stopped (``reports.record_processes_gone``): the engine waits for that before
    it shows workflow code a failure whose failure mode cancelled running steps. Returns the
    keys that were signalled."""
    targets = []
    for key in keys:
        pgid = local.process_group_of(key)
        if pgid is None or pgid == os.getpgrp() or not local.group_alive(pgid):
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
    gone = [local.parse_attempt_key(key) for key, pgid in targets if not local.group_running(pgid)]
    gone = [attempt for attempt in gone if attempt is not None]
    if gone:
        try:
            with no_fork_meanwhile():  # Celery forks the replacement of the pool process just killed
                reports.record_processes_gone(gone)
        except Exception:  # the engine waits at most the grace for it: a lost report only slows it
            logger.exception("kill: could not report the stopped attempts %s", gone)
        finally:
            connections.close_all()  # this thread's own connections: it ends here
