"""Run a set of child processes, each in its own process group, and stop them all gracefully.

Used by ``manage.py standalone``. Each child's whole output (stdout and stderr) goes to its own
file, ``<log_dir>/<name>.log``, so that the terminal keeps only what a person has to see: the
records of WARNING level and above that the children log (with their tracebacks), and a child
that exits by itself, reported with the end of its log. ``verbose`` shows every line instead,
prefixed with the child's name. The files are followed rather than piped, so a child never
blocks on a full pipe and its output stays on disk whatever happens to the supervisor.

One Ctrl-C (SIGINT) or SIGTERM stops every child with SIGTERM to its whole process group, then
SIGKILL to any still alive after ``grace`` seconds; a second one skips the wait.

The log directory and the logs it makes are their owner's only: what a process
logs may name its database, its broker, its operations' arguments.
"""

import logging
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from workflows_app import local_files

#: The level of a record in the two formats the children log in: Celery's worker
#: (``[2026-01-01 10:00:00,000: WARNING/MainProcess] …``) and the project's LOGGING
#: (``2026-01-01 10:00:00,000 WARNING name …``).
LEVEL = re.compile(r"^(?:\[\d{4}-\d\d-\d\d [\d:,.]+: (?P<celery>[A-Z]+)/|\d{4}-\d\d-\d\d [\d:,.]+ (?P<plain>[A-Z]+) )")
#: A line that begins a new record (Celery's, the project's, runserver's ``[01/Jan/2026 …]``);
#: any other non-blank line after a record shown on the terminal (a traceback) belongs to it.
RECORD_START = re.compile(r"^\[?\d")
#: Warnings that say nothing is wrong: Flower asks the workers about themselves as it starts,
#: before they answer, and asks again when a page needs it; a browser asks the web server for the
#: site's icon, which no page serves, and meets a page that needs a login before it logged in
#: (Django logs each answer of 400 and more as a warning of ``django.request``).
IGNORED = (re.compile(r"flower\.inspector Inspect method \w+ failed"),
           re.compile(r" WARNING django\.request (Not Found: /favicon\.ico$|Unauthorized: |Forbidden: )"))
#: At most this many lines of one record (its traceback) are shown; the log file has the rest.
MAX_RECORD_LINES = 30
#: How much of a dead child's log is shown.
TAIL_LINES = 20


@dataclass
class Child:
    name: str
    argv: list
    env: dict = field(default_factory=dict)
    process: subprocess.Popen | None = None
    log_path: Path | None = None


class LogRelay:
    """Follows one child's log file and writes to the terminal the lines a person should see."""

    def __init__(self, name, path, out, verbose):
        self.name = name
        self.path = path
        self.out = out
        self.verbose = verbose
        self._file = None
        self._partial = b""
        self._record_lines_left = 0  # lines of the record being shown that may still follow

    def relay(self, min_level=logging.WARNING):
        """Show the complete lines written since the last call: all of them when verbose,
        else the records of ``min_level`` and above."""
        for line in self._new_lines():
            if self.verbose or self._shown(line, min_level):
                self.out.write(f"{self.name:<8}| {line}\n")

    def _shown(self, line, min_level):
        if not line.strip() or RECORD_START.match(line):
            self._record_lines_left = 0
        if self._record_lines_left > 0:
            self._record_lines_left -= 1
            return True
        match = LEVEL.match(line)
        if match is None or any(pattern.search(line) for pattern in IGNORED):
            return False
        level = logging.getLevelName(match.group("celery") or match.group("plain"))
        if not isinstance(level, int) or level < min_level:
            return False
        self._record_lines_left = MAX_RECORD_LINES - 1
        return True

    def _new_lines(self):
        if self._file is None:
            try:
                self._file = open(self.path, "rb")
            except FileNotFoundError:
                return []
        data = self._partial + self._file.read()
        *lines, self._partial = data.split(b"\n")
        return [line.decode(errors="replace").rstrip("\r") for line in lines]

    def close(self):
        if self._file is not None:
            self._file.close()


class Supervisor:
    """Starts ``children``, waits until a signal asks to stop or one of them exits, and stops
    them all. ``on_tick`` (``wait``) is called on every turn of the wait loop, every ``tick``
    seconds, for what the caller wants to watch meanwhile."""

    def __init__(self, children, *, log_dir, cwd=None, grace=10.0, out=sys.stdout, verbose=False, before_stop=None,
                 tick=0.2):
        self.children = list(children)
        self.log_dir = Path(log_dir)
        self.before_stop = before_stop
        self.cwd = cwd
        self.grace = grace
        self.out = out
        self.verbose = verbose
        self.tick = tick
        self._relays = []
        self._previous_handlers = {}
        self._stopping = False
        self._kill_now = False
        self._stopped = False

    def start(self):
        """Start every child. The signal handlers are in place first: a Ctrl-C from here on
        stops the stack instead of leaving children (in their own sessions) running."""
        self._previous_handlers = {sig: signal.signal(sig, self._ask_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        local_files.private_dir(self.log_dir)
        try:
            for child in self.children:
                self._start(child)
        except BaseException:
            self.stop()
            raise
        self.out.flush()

    def _start(self, child):
        child.log_path = self.log_dir / f"{child.name}.log"
        _keep_previous(child.log_path)
        with open(child.log_path, "wb", opener=local_files.private_opener) as log:
            child.process = subprocess.Popen(
                child.argv, cwd=self.cwd, env={**os.environ, "PYTHONUNBUFFERED": "1", **child.env},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self._relays.append(LogRelay(child.name, child.log_path, self.out, self.verbose))
        self.out.write(f"started {child.name:<8} pid {child.process.pid:<8} output: {child.log_path}\n")

    def wait(self, on_tick=None):
        """Block until a signal asks to stop or a child exits; then stop everything.
        Returns the exit status: 0 for a requested stop, 1 when a child exited by itself."""
        status = 0
        try:
            while not self._stopping:
                self._relay()
                dead = [c for c in self.children if c.process.poll() is not None]
                if dead:
                    for child in dead:
                        self._report_exit(child)
                    status = 1
                    break
                if on_tick is not None:
                    on_tick()
                self.out.flush()
                time.sleep(self.tick)
        finally:
            if self.before_stop is not None and status == 0:
                self.before_stop()
            self.stop()
        return status

    def _ask_stop(self, signum, frame):
        if self._stopping:
            self._kill_now = True
        self._stopping = True

    def _relay(self, min_level=logging.WARNING):
        for relay in self._relays:
            relay.relay(min_level)
        self.out.flush()

    def _report_exit(self, child):
        code = child.process.returncode
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        self.out.write(f"{child.name} {how}; stopping the stack. The end of {child.log_path}:\n")
        for line in _tail(child.log_path, TAIL_LINES):
            self.out.write(f"    {line}\n")

    def stop(self):
        """SIGTERM to every child's process group, SIGKILL after ``grace`` (or a second
        signal); then what they logged while stopping: every line when verbose, else errors."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping = True
        alive = [c for c in self.children if c.process and c.process.poll() is None]
        if alive:
            self.out.write(f"stopping {', '.join(c.name for c in alive)} (Ctrl-C again: kill at once)\n")
            self.out.flush()
        for child in alive:
            _signal_group(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and not self._kill_now and any(c.process.poll() is None for c in alive):
            time.sleep(0.1)
        for child in alive:
            if child.process.poll() is None:
                self.out.write(f"{child.name} did not stop within {self.grace:.0f}s: killed\n")
            _signal_group(child.process.pid, signal.SIGKILL)  # leftovers of the group, too
            child.process.wait()
        self._relay(min_level=logging.ERROR)
        for relay in self._relays:
            relay.close()
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self.out.write("stopped\n")
        self.out.flush()


def _keep_previous(path):
    """The previous run's log becomes ``<name>.log.1``: one run back is kept, and a log never
    grows over runs."""
    if path.exists():
        path.replace(path.with_name(path.name + ".1"))


def _tail(path, lines):
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 200 * lines))
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
