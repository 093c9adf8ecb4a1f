"""An agent's journal: what this agent, on this host, did with each attempt it was sent — across
its runs. One file per attempt (``local.attempt_key``), made with ``O_CREAT | O_EXCL``, so that
of two processes that want the same attempt exactly one makes it:

* ``run <pid>`` — a delivery of this agent started the attempt (unasked, or once a manager's
  answer said to);
* ``stop`` — a manager asked that it never start (``agents.worker.control``'s stop): every
  delivery of it that comes later finds it taken, and none starts it;
* ``end`` — it ran here and ended; its outcome was reported.

A delivery runs an attempt unasked only after it made the attempt's file (:func:`begin`): a
second delivery of it (a message redelivered, sent twice, or given back by an earlier run of the
agent) finds the file and never starts it again, and a stop that came first is seen. The journal
outlives the agent's runs, for as long as a message can wait in a queue (JOURNAL_KEEP_SECONDS):
it is the agent's state directory's, and an agent moved to another host starts with none —
which is why a delivery that is not the attempt's first, or whose grant is older than the
agent's broker connection, asks a manager first (``agents.worker.grants``).
"""

import os
import time
from pathlib import Path

from agents.worker import local
from workflows_app import local_files
from workflows_app.conf import var_dir

RUN, STOP, END = "run", "stop", "end"
#: How long the journal remembers an attempt: longer than a message waits in a queue (Redis gives
#: back an unacknowledged message after its visibility timeout, an hour by default).
JOURNAL_KEEP_SECONDS = 2 * 86400


def _path(agent_name=None) -> Path:
    return var_dir() / "agents" / (agent_name or local.name() or "unnamed") / "journal"


def _create(key, text) -> bool:
    """Make ``key``'s file holding ``text``; False when it exists."""
    path = _path() / key
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, local_files.FILE_MODE)
    except FileNotFoundError:
        local_files.private_dir(path.parent)
        return _create(key, text)
    except FileExistsError:
        return False
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return True


def begin(key) -> bool:
    """Take attempt ``key`` to start it in this process: True when no delivery started it here
    and no stop names it; False otherwise (it must not start unasked)."""
    return _create(key, f"{RUN} {os.getpid()}\n")


def note_started(key):
    """Attempt ``key`` starts here because a manager said so (its claim's answer): noted, whatever
    the journal had."""
    if not begin(key):
        _replace(key, f"{RUN} {os.getpid()}\n")


def end(key):
    """Attempt ``key`` ended here, its outcome reported."""
    _replace(key, f"{END}\n")


def stop(key) -> str:
    """A manager asks that attempt ``key`` never start: ``"refused"`` when no delivery started it
    here (none ever will), ``"running"`` when one runs it now, ``"ended"`` when it ran here."""
    if _create(key, f"{STOP}\n"):
        return "refused"
    entry = read(key)
    if entry == STOP:
        return "refused"
    if entry == RUN and local.process_group_of(key) is not None:
        return "running"
    if entry == RUN and _started_moments_ago(key):
        return "running"  # between its begin and its running record
    return "ended"


def read(key):
    """``RUN``, ``STOP`` or ``END`` for attempt ``key``; None when the journal has none."""
    try:
        text = (_path() / key).read_text()
    except FileNotFoundError:
        return None
    word = text.split(" ", 1)[0].strip()
    return word if word in (RUN, STOP, END) else RUN  # a file being written is one being started


def began(key) -> tuple[int, float]:
    """The pid of the process that started attempt ``key`` here (0 when the journal does not
    say) and when its entry was last written (seconds since the epoch; now when it has none)."""
    path = _path() / key
    try:
        text, moment = path.read_text(), path.stat().st_mtime
    except FileNotFoundError:
        return 0, time.time()
    word, _, pid = text.strip().partition(" ")
    return (int(pid) if word == RUN and pid.isdigit() else 0), moment


def _started_moments_ago(key, seconds=5.0) -> bool:
    try:
        return time.time() - (_path() / key).stat().st_mtime < seconds
    except FileNotFoundError:
        return False


def _replace(key, text):
    path = _path() / key
    local_files.private_dir(path.parent)
    partial = path.with_name(f".{key}.{os.getpid()}")
    local_files.write_private(partial, text)
    os.replace(partial, path)


def forget_old(agent_name, older_than=JOURNAL_KEEP_SECONDS):
    """Forget what the journal of ``agent_name`` holds about attempts older than ``older_than``."""
    limit = time.time() - older_than
    for entry in local_files.private_dir(_path(agent_name)).iterdir():
        try:
            if entry.stat().st_mtime < limit:
                entry.unlink(missing_ok=True)
        except FileNotFoundError:
            pass
