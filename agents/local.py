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


def mark_running(operation_id, attempt):
    """Record that this process (the leader of its own process group) runs the attempt."""
    (running_dir() / f"{operation_id}.{attempt}").write_text(str(os.getpgrp()))


def mark_done(operation_id, attempt):
    (running_dir() / f"{operation_id}.{attempt}").unlink(missing_ok=True)


def running_here(operation_id, attempt) -> bool:
    """Whether a live process group on this host still runs the attempt."""
    try:
        pgid = int((running_dir() / f"{operation_id}.{attempt}").read_text())
    except (OSError, ValueError):
        return False
    return pgid != os.getpgrp() and _group_alive(pgid)


def kill_leftovers(agent_name) -> list[int]:
    """SIGKILL every process group an earlier run of ``agent_name`` left on this host."""
    killed = []
    for entry in running_dir(agent_name).iterdir():
        try:
            pgid = int(entry.read_text())
        except (OSError, ValueError):
            pgid = None
        if pgid and _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
                killed.append(pgid)
            except (ProcessLookupError, PermissionError):
                pass
        entry.unlink(missing_ok=True)
    return killed


def _group_alive(pgid) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
