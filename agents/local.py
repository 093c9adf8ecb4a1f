"""What an agent process knows about itself: its name, this run's incarnation id, and the
operations its pool processes are running on this host (kept as files under its state
directory, so that a later run can find and kill what an earlier one left behind)."""

import os
import signal
from pathlib import Path

from django.conf import settings

NAME_ENV = "SWITCHYARD_AGENT_NAME"
INCARNATION_ENV = "SWITCHYARD_AGENT_INCARNATION"


def name():
    return os.environ.get(NAME_ENV, "")


def incarnation():
    return os.environ.get(INCARNATION_ENV, "")


def running_dir(agent_name=None) -> Path:
    path = Path(settings.VAR_DIR) / "agents" / (agent_name or name() or "unnamed") / "running"
    path.mkdir(parents=True, exist_ok=True)
    return path


def attempt_key(operation_id, attempt) -> str:
    """The name under which an operation's attempt is recorded while it runs."""
    return f"{operation_id}.{attempt}"


def dispatcher_key(execution_id) -> str:
    """The name under which an execution's dispatcher is recorded while it runs."""
    return f"dispatch-{execution_id}"


def mark_running(key):
    """Record that this process (the leader of its own process group) runs ``key``."""
    (running_dir() / key).write_text(str(os.getpgrp()))


def mark_done(key):
    (running_dir() / key).unlink(missing_ok=True)


def process_group_of(key):
    """The process group recorded as running ``key`` on this host, or None."""
    try:
        return int((running_dir() / key).read_text())
    except (OSError, ValueError):
        return None


def running_here(operation_id, attempt) -> bool:
    """Whether a live process group on this host, other than this process', still runs the attempt."""
    pgid = process_group_of(attempt_key(operation_id, attempt))
    return pgid is not None and pgid != os.getpgrp() and group_alive(pgid)


def kill_leftovers(agent_name) -> list[int]:
    """SIGKILL every process group an earlier run of ``agent_name`` left on this host."""
    killed = []
    for entry in running_dir(agent_name).iterdir():
        try:
            pgid = int(entry.read_text())
        except (OSError, ValueError):
            pgid = None
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
