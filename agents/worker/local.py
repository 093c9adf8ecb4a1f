"""What an agent process knows about itself: its name, this run's incarnation id, and the
operations its pool processes are running on this host (kept as files under its state
directory, so that a later run can find and kill what an earlier one left behind)."""

import enum
import json
import os
import signal
import time
from pathlib import Path

import psutil

from workflows_app import local_files
from workflows_app.conf import var_dir

NAME_ENV = "SWITCHYARD_AGENT_NAME"
INCARNATION_ENV = "SWITCHYARD_AGENT_INCARNATION"
DISPATCHER_PREFIX = "dispatch-"
#: How long an attempt that ended on this host is remembered (:func:`earlier_delivery`):
#: far longer than its outcome report takes to be stored.
FINISHED_KEEP_SECONDS = 3600
#: How long a duplicate delivery waits for the record of the delivery that was answered "run"
#: at the same moment (that one records itself right after its answer), when the answer does not
#: name the process whose claim started the attempt.
SETTLE_SECONDS = 2.0


def name():
    return os.environ.get(NAME_ENV, "")


def incarnation():
    return os.environ.get(INCARNATION_ENV, "")


def running_dir(agent_name=None) -> Path:
    return local_files.private_dir(_running_path(agent_name))


def _running_path(agent_name=None) -> Path:
    return var_dir() / "agents" / (agent_name or name() or "unnamed") / "running"


def attempt_key(operation_id, attempt) -> str:
    """The name under which an operation's attempt is recorded while it runs."""
    return f"{operation_id}.{attempt}"


def parse_attempt_key(key):
    """``(operation id, attempt)`` of a key :func:`attempt_key` made; None for another key."""
    operation_id, _, attempt = key.rpartition(".")
    if key.startswith(DISPATCHER_PREFIX) or not operation_id or not attempt.isdigit():
        return None
    return operation_id, int(attempt)


def dispatcher_key(execution_id) -> str:
    """The name under which an execution's dispatcher is recorded while it runs."""
    return f"{DISPATCHER_PREFIX}{execution_id}"


def running_keys() -> list[str]:
    """The keys (attempts and dispatchers) this worker's pool processes run now. (Managers on
    one host share a running directory: each counts only the groups its own children lead.)"""
    keys = []
    for entry in running_dir().iterdir():
        pgid = recorded_group(entry)
        if pgid is not None and pgid != os.getpgrp() and _my_child(pgid):
            keys.append(entry.name)
    return keys


def _my_child(pid) -> bool:
    try:
        return psutil.Process(pid).ppid() == os.getpid()
    except psutil.Error:
        return False


def running_attempts() -> list[str]:
    """The keys of the operation attempts running on this host now."""
    return [key for key in running_keys() if not key.startswith(DISPATCHER_PREFIX)]


def mark_running(key):
    """Record that this process (the leader of its own process group) runs ``key``. Every
    operation and every dispatcher pass does: the directory is made only when the file cannot be
    written without it."""
    path = _running_path() / key
    text = f"{os.getpgrp()}\n"
    try:
        path.write_text(text)
    except FileNotFoundError:
        local_files.private_dir(path.parent)
        path.write_text(text)


def mark_done(key):
    """The attempt (or dispatcher pass) ``key`` ended in this process. An attempt is remembered
    as finished here before its running record goes, so that no moment has neither."""
    if parse_attempt_key(key) is not None:
        path = _finished_path() / key
        try:
            path.touch(mode=local_files.FILE_MODE)
        except FileNotFoundError:
            local_files.private_dir(path.parent)
            path.touch(mode=local_files.FILE_MODE)
    (_running_path() / key).unlink(missing_ok=True)
    (_cancel_path() / key).unlink(missing_ok=True)


def mark_claiming(key):
    """Record that this process claims ``key`` (a delivery of it waits here for the managers'
    answer): another delivery of the same attempt, told that this process' claim started it, then
    leaves it to this process (:func:`earlier_delivery`). Cleared by :func:`clear_claiming` once
    this process ran the attempt (after :func:`mark_running`) or gave it up."""
    path = _claiming_path() / f"{key}@{os.getpid()}"
    try:
        path.touch(mode=local_files.FILE_MODE)
    except FileNotFoundError:
        local_files.private_dir(path.parent)
        path.touch(mode=local_files.FILE_MODE)


def clear_claiming(key):
    (_claiming_path() / f"{key}@{os.getpid()}").unlink(missing_ok=True)


def _holds_claim(key, pid) -> bool:
    """Whether process ``pid`` still claims ``key`` here: its record, and the process alive."""
    return (_claiming_path() / f"{key}@{pid}").exists() and psutil.pid_exists(pid)


def remember_outcome(key, report):
    """Keep the outcome report of attempt ``key`` (its fields) with
    its finished record, once the broker took it: :func:`kept_outcome` gives it back when the
    managers ask for it again (``agents.worker.control``): a report can be lost after the broker
    took it, when it is handed to a manager that dies before it stored it."""
    path = _finished_path() / key
    try:
        local_files.write_private(path, json.dumps(report))
    except FileNotFoundError:
        local_files.private_dir(path.parent)
        local_files.write_private(path, json.dumps(report))


def kept_outcome(key, ended_before):
    """The outcome report :func:`remember_outcome` kept for ``key`` if the attempt ended here more
    than ``ended_before`` seconds ago, else None. ``key`` is one :func:`attempt_key` made from
    checked values: it names a record, never another path."""
    path = _finished_path() / key
    try:
        if time.time() - path.stat().st_mtime < ended_before:
            return None
        report = json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def forget_finished(agent_name=None, older_than=FINISHED_KEEP_SECONDS):
    """Drop the records of attempts that finished here more than ``older_than`` seconds ago
    (all of them with 0)."""
    cutoff = time.time() - older_than
    try:
        entries = list(_finished_path(agent_name).iterdir())
    except FileNotFoundError:
        return
    for entry in entries:
        try:
            if older_than <= 0 or entry.stat().st_mtime < cutoff:
                entry.unlink(missing_ok=True)
        except OSError:
            pass


def _cancel_path(agent_name=None) -> Path:
    return var_dir() / "agents" / (agent_name or name() or "unnamed") / "cancelled"


def _finished_path(agent_name=None) -> Path:
    return var_dir() / "agents" / (agent_name or name() or "unnamed") / "finished"


def _claiming_path(agent_name=None) -> Path:
    return var_dir() / "agents" / (agent_name or name() or "unnamed") / "claiming"



def request_cancel(keys) -> list[str]:
    """Note that the attempts ``keys`` are asked to stop (their execution is cancelling, or the
    step was cancelled), for ``ctx.is_cancelled()`` in their processes. Only keys of attempts
    running here are noted, looked up as :func:`recorded_groups` does; returns those."""
    running = list(recorded_groups(keys))
    if running:
        directory = local_files.private_dir(_cancel_path())
        for key in running:
            (directory / key).touch(mode=local_files.FILE_MODE)
    return running


def cancel_requested(key) -> bool:
    return (_cancel_path() / key).exists()


def process_group_of(key):
    """The process group recorded as running ``key`` on this host, or None. ``key`` is one this
    worker made or listed itself; a key that arrived in a message goes through
    :func:`recorded_groups`."""
    return recorded_group(running_dir() / key)


def recorded_groups(keys) -> dict[str, int]:
    """The process group recorded for each of ``keys`` that this worker's running directory holds
    a record of. The keys are only compared with the names of the records, never joined to a
    path: a key from a message (``../../etc/passwd``) cannot make this read a file elsewhere, nor
    name a process group that no record of this directory holds."""
    wanted = set(keys)
    found = {}
    for entry in running_dir().iterdir():
        if entry.name in wanted:
            pgid = recorded_group(entry)
            if pgid is not None:
                found[entry.name] = pgid
    return found


def recorded_group(entry: Path):
    """The process group id a file of a running directory holds, or None. Only a pool process'
    own group is ever recorded: 0 and 1 (``killpg`` would reach the caller's own group, or
    init's) are not process groups of an operation."""
    try:
        pgid = int(entry.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    return pgid if pgid > 1 else None


class Delivery(enum.Enum):
    """What became of an earlier delivery of an attempt to this run of the agent."""

    RUNNING = "running"      # another pool process runs it, or holds the claim that started it
    FINISHED = "finished"    # it ended here (its outcome report may not be stored yet)
    DIED = "died"            # its pool process died while it ran
    NEVER_RAN = "never ran"  # it was claimed, and the answer never came: nothing ran it


def earlier_delivery(operation_id, attempt, claimed_by=None, settle_seconds=SETTLE_SECONDS) -> Delivery:
    """For a delivery whose claim was answered "already started by this run of the agent":
    what became of the delivery that started it. ``claimed_by``: the pid of the process whose
    claim started it, as the managers stored it (None when the answer does not say).

    A record naming a live process group other than this process' is one running it; a record
    naming a gone group (or this very process, which runs nothing else) is one that died. With no
    record: another live process that still claims it will run it (its own claim, sent again, is
    answered that it started it); else nothing ran it — the claim was this process' own, or its
    process gave it up or died before it ran it. Without ``claimed_by``, a delivery answered "run"
    in the same batch may not have recorded itself yet: it is waited for, ``settle_seconds``."""
    key = attempt_key(operation_id, attempt)
    # Read before the records: a claimant that ran the attempt recorded it before it stopped claiming.
    held = claimed_by is not None and claimed_by != os.getpid() and _holds_claim(key, claimed_by)
    deadline = time.monotonic() + (settle_seconds if claimed_by is None else 0)
    while True:
        if (_finished_path() / key).exists():
            return Delivery.FINISHED
        pgid = process_group_of(key)
        if pgid is not None:
            return Delivery.DIED if pgid == os.getpgrp() or not group_alive(pgid) else Delivery.RUNNING
        if held:
            return Delivery.RUNNING
        if time.monotonic() >= deadline:
            return Delivery.NEVER_RAN
        time.sleep(0.05)


def kill_leftovers(agent_name) -> list[int]:
    """SIGKILL every process group an earlier run of ``agent_name`` left on this host."""
    for path in (_cancel_path(agent_name), _claiming_path(agent_name)):
        for entry in local_files.private_dir(path).iterdir():
            entry.unlink(missing_ok=True)
    forget_finished(agent_name, older_than=0)
    killed = []
    for entry in running_dir(agent_name).iterdir():
        pgid = recorded_group(entry)
        if pgid and group_alive(pgid) and signal_group(pgid, signal.SIGKILL):
            killed.append(pgid)
        entry.unlink(missing_ok=True)
    return killed


def signal_group(pgid, sig) -> bool:
    """Send ``sig`` to the process group ``pgid``; False when it is gone (or not ours)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(pgid) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_running(pgid) -> bool:
    """Whether a process of the group ``pgid`` still runs. A process that died but that its
    parent has not reaped yet (a zombie: a pool process until its worker notices) holds nothing
    and runs nothing, though signals still reach its group."""
    if not group_alive(pgid):
        return False
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    return False
